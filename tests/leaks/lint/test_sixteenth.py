"""Round fifteen's classes from freezes E and F (issue 41), each on small models written for
this test, none copied from a library:

- a tensor handed to a method chosen at run time (a name or attribute bound to bound
  methods, by ``if``/``else``, a conditional expression or a dict; a staticmethod or a
  classmethod at the end) is followed into every method it may be (:mod:`.chosen`);
- ``torch.tensor(data)`` of data of any dtype is fp32 once an op that gives floats
  (softmax, sigmoid, true division) has run on it (:mod:`.floated`);
- what a method of the class returns is judged (:mod:`.returned`), so an fp32 buffer that a
  join or arithmetic promotes with a method's half result is reported;
- HP302: a value whose dtype the code checks, a parameter that every caller passes out of
  half (also through ``Function.apply``), a parameter annotated ``float``, a helper's
  returned tuple (:mod:`.decided`).

Each test fails on the rules before this round; its silent siblings are asserted beside.
"""

from __future__ import annotations

from support.lint_models import HEAD_F, Snippets

LINT = Snippets(HEAD_F, prefix="HP")
_found = LINT.found


# -- methods chosen at run time ---------------------------------------------------------------
def test_prior_through_a_conditional_method_into_a_staticmethod_is_reported() -> None:
    body = """\
        class Matcher(nn.Module):
            def __init__(self, d, pairwise):
                super().__init__()
                self.enc = nn.Linear(d, d)
                self.pairwise = pairwise

            def _pairs(self, a, b, prior=None):
                sim = a @ b.t()
                return self.blend(sim, prior)

            def _rows(self, a, b, prior=None):
                sim = (a * b).sum(-1, keepdim=True)
                return self.blend(sim, prior)

            @staticmethod
            def blend(sim, prior):
                return sim.log_softmax(-1) * prior

            def forward(self, a, b, prior: list):
                a, b = self.enc(a), self.enc(b)
                weight = torch.tensor(prior, device=a.device).softmax(-1)
                pick = self._pairs if self.pairwise else self._rows
                return pick(a, b, prior=weight)
        """
    assert _found(body) == [(21, "HP101")]


def test_if_else_chosen_method_whose_loss_is_returned_is_reported() -> None:
    body = """\
        class Distiller(nn.Module):
            def __init__(self, d, wide):
                super().__init__()
                self.student = nn.Linear(d, d)
                self.wide = wide

            def _narrow(self, s, soft=None):
                part = self.kd(s[:, :4], soft)
                return s, part

            def _broad(self, s, soft=None):
                return s, self.kd(s, soft)

            @classmethod
            def kd(cls, logits, soft):
                return -(torch.log_softmax(logits, -1) * soft).sum(-1).mean()

            def forward(self, x, teacher: list[float]):
                s = self.student(x)
                soft = F.softmax(torch.tensor(teacher) / 2.0, dim=-1)
                if self.wide:
                    run = self._broad
                else:
                    run = self._narrow
                out, loss = run(s, soft=soft)
                return out, loss
        """
    assert _found(body) == [(20, "HP101")]


def test_method_chosen_in_init_and_called_in_forward_is_followed() -> None:
    body = """\
        class Head(nn.Module):
            def __init__(self, d, smooth):
                super().__init__()
                self.proj = nn.Linear(d, d)
                self.score = self._smooth if smooth else self._sharp

            def _smooth(self, h, mix):
                return h + mix

            def _sharp(self, h, mix):
                return h.to(mix.dtype)

            def forward(self, x):
                h = self.proj(x)
                mix = torch.ones(h.shape[-1])
                return self.score(h, mix=mix)
        """
    assert _found(body) == [(15, "HP101")]


def test_dict_of_methods_is_followed_and_a_cast_back_stays_silent() -> None:
    body = """\
        class Pool(nn.Module):
            def __init__(self, d, mode):
                super().__init__()
                self.proj = nn.Linear(d, d)
                self.mode = mode

            def _mean(self, h, w):
                return (h * w).mean(1)

            def _first(self, h, w):
                return h[:, 0] * w[0].to(h.dtype)

            def _safe(self, h, w):
                return h * w.to(h.dtype)

            def forward(self, x):
                h = self.proj(x)
                w = torch.ones(h.shape[1], 1)
                fns = {"mean": self._mean, "first": self._first}
                v = torch.ones(h.shape[1], 1)
                safe = self._safe
                return fns[self.mode](h, w), safe(h, v)
        """
    assert _found(body) == [(18, "HP101")]


# -- data of any dtype made floating ----------------------------------------------------------
def test_list_data_made_floating_by_sigmoid_meets_half() -> None:
    body = """\
        class Scale(nn.Module):
            def __init__(self, d):
                super().__init__()
                self.proj = nn.Linear(d, d)

            def forward(self, x, counts: list):
                h = self.proj(x)
                w = torch.tensor(counts, device=h.device)
                rate = w.sigmoid()
                idx = torch.tensor(counts, device=h.device)
                return h * rate[:, None], h[idx]
        """
    assert _found(body) == [(8, "HP101")]


# -- promotion with what a method returns ---------------------------------------------------------
def test_rolling_buffer_joined_with_a_method_result_is_reported() -> None:
    body = """\
        class Stage(nn.Module):
            def __init__(self, d, k):
                super().__init__()
                self.cell = nn.Linear(2 * d, d)
                self.k = k

            def step(self, xt, h):
                h = torch.tanh(self.cell(torch.cat([xt, h], -1)))
                return h, h.mean(-1)

            def forward(self, x):
                b, t, d = x.shape
                h = x[:, 0]
                window = torch.zeros(self.k, b)
                hist = list(torch.zeros(self.k, b))
                out = []
                for i in range(t):
                    h, level = self.step(x[:, i], h)
                    window = torch.cat([window[1:], (1 - level)[None]], 0)
                    hist = hist[1:] + [level]
                    w = torch.stack(hist, 0).softmax(0).amax(0)
                    out.append(h * window.softmax(0).mean(0)[:, None] + w.to(h.dtype)[:, None])
                return torch.stack(out, 1)
        """
    assert _found(body) == [(14, "HP101"), (15, "HP101")]


def test_state_mixed_by_arithmetic_with_a_method_gate_is_reported() -> None:
    body = """\
        class Gated(nn.Module):
            def __init__(self, d):
                super().__init__()
                self.gate = nn.Linear(d, d)
                self.cand = nn.Linear(d, d)

            def _parts(self, xt):
                return torch.sigmoid(self.gate(xt)), self.cand(xt)

            def _stats(self, xt):
                return xt.float().mean(-1)

            def forward(self, x):
                state = torch.zeros(x.shape[0], x.shape[2])
                norm = torch.zeros(x.shape[0])
                for i in range(x.shape[1]):
                    g, c = self._parts(x[:, i])
                    state = g * state + (1 - g) * c
                    norm = torch.where(norm > 0, norm, self._stats(x[:, i]))
                return state.to(x.dtype), norm.to(x.dtype)
        """
    assert _found(body) == [(14, "HP101")]


# -- HP302: dtypes the code decides ---------------------------------------------------------------
def test_eps_on_a_dtype_checked_value_is_silent_and_on_an_unchecked_one_reported() -> None:
    body = """\
        def _bounds(lo, hi):
            if lo.dtype != torch.float32 or lo.shape != hi.shape:
                raise TypeError("lo must be fp32")
            assert hi.dtype == torch.float32
            return lo - torch.finfo(torch.float32).tiny * (lo.abs() + hi.abs())


        def _loose(t):
            return t + torch.finfo(torch.float32).tiny * t.abs()


        class Root(nn.Module):
            def forward(self, x):
                y = self.lin(x)
                return _bounds(y, y), _loose(y)
        """
    assert _found(body, "HP3") == [(9, "HP302")]


def test_a_parameter_is_what_every_caller_passes() -> None:
    body = """\
        def _tol(a, scale: float):
            return 8 * torch.finfo(torch.float32).tiny * a.abs() * scale


        def _tol2(a):
            return 8 * torch.finfo(torch.float32).tiny * a.abs()


        class Root(nn.Module):
            def forward(self, x):
                y = self.lin(x)
                wide = y.detach().double()
                lo, hi = wide.min(), wide.max()
                return _tol(lo, 2.0), _tol(hi, 1.0), _tol2(wide), _tol2(y)
        """
    assert _found(body, "HP3") == [(6, "HP302")]


def test_autograd_function_inputs_are_what_apply_passes() -> None:
    body = """\
        def _pair(t):
            if t.dtype not in (torch.float32, torch.float64):
                raise TypeError("fp32 or fp64 only")
            return t, t.abs()


        class _Solve(torch.autograd.Function):
            @staticmethod
            def forward(ctx, knots, scale):
                lo, mag = _pair(knots)
                return lo + torch.finfo(torch.float32).tiny * mag * scale


        class _Loose(torch.autograd.Function):
            @staticmethod
            def forward(ctx, knots):
                return knots + torch.finfo(torch.float32).tiny * knots.abs()


        class Root(nn.Module):
            def forward(self, x):
                y = self.lin(x)
                a = _Solve.apply(y.float(), 2.0)
                return a, _Loose.apply(y)
        """
    assert _found(body, "HP3") == [(17, "HP302")]


def test_methods_looped_over_and_bound_by_partial_are_followed() -> None:
    body = """\
        import functools


        class Mixer(nn.Module):
            def __init__(self, d):
                super().__init__()
                self.enc = nn.Linear(d, d)
                self.scale = nn.Parameter(torch.ones(d))

            def _shift(self, s, target):
                return s + target

            def _gain(self, s, target):
                return s * (target * self.scale).to(s.dtype)

            def forward(self, x):
                s = self.enc(x)
                b = torch.ones(s.shape[-1])
                d = torch.ones(s.shape[-1])
                out = s
                for fn in (self._gain, self._shift):
                    out = out + fn(s, b).to(s.dtype)
                scaled = functools.partial(self._gain, target=d)
                return out + scaled(s)
        """
    assert _found(body) == [(18, "HP101"), (19, "HP101")]
