"""Round sixteen, class B (issue 41): values through module-level helpers and keyed stores,
on small models written for this test, none copied from a library:

- a tensor handed to a helper's ``*rows`` or ``**parts`` is followed into it, also through
  a comprehension with several loops (``[v for row in rows for v in row]``);
- a value is fp32 on purpose only if every assignment that may reach its read makes it so:
  a draw replaced by an explicit fp32 value only in a debug branch still meets half;
- an fp32 tensor written into a keyed store (``g.edata["w"] = t``, ``parts["w"] = t``)
  that half values are written into too, or that a call takes with half values, is
  combined with them by whoever reads the store.

Each test fails on the rules before this round; its silent siblings are asserted beside.
"""

from __future__ import annotations

from halfprec.leaks.lint.config import LintConfig
from support.lint_models import HEAD_F, Snippets

LINT = Snippets(HEAD_F, prefix="HP1", config=LintConfig(select=("HP",)))  # every rule
_found = LINT.found


# -- helpers' *rows and **parts ---------------------------------------------------------------
def test_draw_through_a_helpers_star_rows_into_a_sampling_grid_is_reported() -> None:
    body = """\
        def affine(*rows):
            cells = [cell for row in rows for cell in row]
            return torch.stack(cells, dim=-1).unflatten(-1, (len(rows), -1))


        def shear(k):
            one, zero = torch.ones_like(k), torch.zeros_like(k)
            return affine([one, k, zero], [zero, one, zero])


        class Shear(nn.Module):
            def __init__(self, c, strength):
                super().__init__()
                self.proj = nn.Conv2d(c, c, 1)
                self.strength = strength

            def forward(self, x):
                h = self.proj(x)
                k = torch.randn(x.shape[0], device=x.device) * self.strength
                theta = shear(k)
                grid = F.affine_grid(theta, list(h.shape), align_corners=False)
                return F.grid_sample(h, grid, align_corners=False)
        """
    assert _found(body) == [(19, "HP101")]


def test_draw_among_a_helpers_star_columns_is_reported() -> None:
    body = """\
        def columns(*cols):
            return torch.stack(cols, dim=-1)


        class Jitter(nn.Module):
            def __init__(self, d):
                super().__init__()
                self.mix = nn.Linear(d, d)

            def forward(self, x):
                h = self.mix(x)
                lo = torch.rand(x.shape[:-1], device=x.device)
                band = columns(torch.zeros_like(h[..., 0]), lo, lo)
                return h[..., :3] * band
        """
    assert _found(body) == [(12, "HP101")]
    counted = """\
        def rows_of(*rows):
            return len(rows), rows[0].shape[0]


        def pick(h, *idx):
            return h[idx[0].long()]


        class Pick(nn.Module):
            def __init__(self, d):
                super().__init__()
                self.mix = nn.Linear(d, d)

            def forward(self, x):
                h = self.mix(x)
                r = torch.rand(x.shape[0], device=x.device)
                n, m = rows_of(r, r)
                return pick(h, r * n)
        """
    assert _found(counted) == []  # *rows only counted, measured or made indices


def test_draw_given_by_keyword_to_a_helpers_star_star_parts_is_reported() -> None:
    body = """\
        def scaled(h, **parts):
            return h * parts["gain"]


        class Gain(nn.Module):
            def __init__(self, d):
                super().__init__()
                self.mix = nn.Linear(d, d)

            def forward(self, x):
                h = self.mix(x)
                g = torch.rand(h.shape[-1], device=x.device)
                return scaled(h, gain=g, note=None)
        """
    assert _found(body) == [(12, "HP101")]


# -- every assignment that may reach a read ----------------------------------------------------
_COLOUR = """\
    def gain(g):
        z = torch.zeros_like(g)
        return torch.stack([g, z, z, z, g, z, z, z, g], -1).view(-1, 3, 3)


    class Colour(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 3, 1)

        def forward(self, x, pinned=None):
            b = x.shape[0]
            if pinned is not None:
                pinned = torch.as_tensor(pinned, dtype=torch.float32, device=x.device)
            g = torch.rand(b, device=x.device) + 0.5
            {first}
            m = gain(g)
            k = torch.rand(b, device=x.device) + 0.5
            if pinned is not None:
                k = torch.full_like(k, pinned)
            m = gain(k) @ m
            h = self.conv(x)
            return (m @ h.flatten(2)).view_as(h)
    """


def test_draw_meeting_a_matrix_fp32_on_purpose_only_in_a_debug_branch_is_reported() -> None:
    debug = "if pinned is not None:\n                g = torch.full_like(g, pinned)"
    assert _found(_COLOUR.format(first=debug)) == [(15, "HP101"), (19, "HP101")]
    # the fp32 debug value is only a fill value, written in the draws' dtype: no HP202
    assert _found(_COLOUR.format(first=debug), prefix="HP2") == []
    always = "g = pinned.expand(b)"  # the matrix is fp32 on purpose, whatever the branch
    assert _found(_COLOUR.format(first=always)) == []
    both = (
        "if pinned is not None:\n                g = pinned.expand(b)\n"
        "            else:\n                g = torch.ones(b, dtype=torch.float64)"
    )
    assert _found(_COLOUR.format(first=both)) == []


# -- keyed stores shared with half values ------------------------------------------------------
def test_fp32_entry_beside_half_entries_of_a_graph_read_by_its_method_is_reported() -> None:
    body = """\
        class Spread(nn.Module):
            def __init__(self, d):
                super().__init__()
                self.lin = nn.Linear(d, d)

            def forward(self, graph, nodes):
                h = nodes * 2
                for _ in range(3):
                    graph.store["x"] = h
                    graph.links["a"] = torch.rand(graph.num_links(), 1)
                    graph.spread("x", "a", out="x")
                    h = self.lin(graph.store.pop("x"))
                return h
        """
    assert _found(body) == [(10, "HP101")]
    cast = 'w = graph.links["a"].to(h.dtype)\n' + " " * 20
    read_back = body.replace("graph.spread(", cast + "graph.spread(")
    assert _found(read_back) == []  # the entry is read back and cast: that read is followed
    only_fp32 = body.replace('graph.store["x"] = h', 'graph.store["x"] = graph.degrees().float()')
    assert _found(only_fp32) == []  # nothing half shares the store
    counted = body.replace("torch.rand(graph.num_links(), 1)", "torch.arange(graph.num_links())")
    assert _found(counted) == []  # an integer entry
    typed = body.replace('graph.store["x"]', 'graph.kinds["item"].store["x"]').replace(
        'graph.links["a"]', 'graph.relations["buys"].links["a"]'
    )
    assert _found(typed) == [(10, "HP101")]  # entries of one kind of node or link


def test_fp32_entry_of_a_store_handed_to_a_call_with_half_values_is_reported() -> None:
    body = """\
        from .layers import GraphConv


        class Gated(nn.Module):
            def __init__(self, d):
                super().__init__()
                self.conv = GraphConv(d, d)

            def forward(self, g, feat):
                g.edata["gate"] = torch.full((g.num_edges(), 1), 0.5, device=feat.device)
                out = self.conv(g, feat)
                return out
        """
    assert _found(body) == [(10, "HP101")]
    shapes_only = body.replace("self.conv(g, feat)", "self.conv(g, feat.shape[0])")
    assert _found(shapes_only) == []  # only the features' shape goes with it


def test_fp32_entry_of_a_dict_that_holds_half_values_handed_to_an_unseen_call_is_reported() -> None:
    body = """\
        from .fusion import fuse


        class Fuse(nn.Module):
            def __init__(self, d):
                super().__init__()
                self.enc = nn.Linear(d, d)

            def forward(self, x):
                h = self.enc(x)
                parts = {}
                parts["h"] = h
                parts["w"] = torch.ones(h.shape[0], 1, device=h.device)
                return fuse(parts)
        """
    assert _found(body) == [(13, "HP101")]
    before = body.replace("return fuse(parts)", "return h").replace('parts["h"] = h', "fuse(parts)")
    assert _found(before) == []  # handed on before the entry is written
    no_half = body.replace('parts["h"] = h', "pass").replace("fuse(parts)", "fuse(h, **parts)")
    assert _found(no_half) == []  # the dict holds no half value: a model casts what it is given
    empty = body.replace("torch.ones(h.shape[0], 1, device=h.device)", "torch.empty(0)")
    assert _found(empty) == []  # a placeholder with no elements


def test_draw_handed_on_through_star_args_of_a_second_helper_is_reported() -> None:
    body = """\
        def grid_of(*rows, **kw):
            flat = [v.float() for row in rows for v in row]
            return torch.stack(flat, -1).view(-1, len(rows), len(rows[0]))


        def turn(*args, **kw):
            return grid_of(*args, **kw)


        def spin(a):
            c, s = torch.cos(a), torch.sin(a)
            z = torch.zeros_like(a)
            return turn([c, -s, z], [s, c, z])


        class Warp(nn.Module):
            def __init__(self, c):
                super().__init__()
                self.conv = nn.Conv2d(c, c, 3, padding=1)

            def forward(self, x):
                h = self.conv(x)
                a = torch.rand(h.shape[0], device=h.device) * 6.28
                grid = F.affine_grid(spin(a), list(h.shape), align_corners=False)
                return F.grid_sample(h, grid, align_corners=False)
        """
    assert _found(body) == [(23, "HP101")]
