"""Round seventeen, recall (issue 41): values made where the lint lost them, on small
models written for this test, none copied from a library:

- a tensor wrapped by ``torch.autograd.Variable(...)`` is the same tensor: an fp32 buffer
  or padding made in a helper so wrapped still meets the half values it is given;
- a constructor parameter defaulting to a module (``plan=Ramp()``) makes ``self.plan``
  that module: its ``forward``'s fp32 table is followed into the caller that mixes it
  with half values;
- an fp32 vector of one value per batch item (``t * torch.ones(x.shape[0])``,
  ``torch.full((b,), s)``) handed to a network beside its half input is a condition the
  network embeds with half weights;
- an upcast made only on some devices (``if not x.is_cuda: x = x.float()``) leaves the
  value half on the others.

Each test fails on the rules before this round; its silent siblings are asserted beside.
"""

from __future__ import annotations

from halfprec.leaks.lint.config import LintConfig
from support.lint_models import HEAD_F, Snippets

LINT = Snippets(HEAD_F, prefix="HP1", config=LintConfig(select=("HP",)))  # every rule
_found = LINT.found


# -- Variable(...) ---------------------------------------------------------------------------
def test_buffer_and_padding_wrapped_in_variable_in_a_helper_are_reported() -> None:
    body = """\
        from torch.autograd import Variable


        def rolled(seq, kernel):
            n, b, c, w = seq.size()
            acc = Variable(torch.zeros(n, b, c, w), requires_grad=seq.requires_grad)
            edge = Variable(torch.zeros(1, b, c, w))
            wide = torch.cat((edge, seq, edge), 0)
            for i in range(n):
                acc[i] = F.conv1d(wide[i + 1], kernel)
            return acc


        class Rolling(nn.Module):
            def __init__(self, c):
                super().__init__()
                self.kernel = nn.Parameter(torch.randn(c, c, 1))
                self.out = nn.Linear(c, c)

            def forward(self, x):
                return self.out(rolled(x, self.kernel))
        """
    assert _found(body) == [(6, "HP101"), (7, "HP101")]
    cast = body.replace(
        "torch.zeros(1, b, c, w))", "torch.zeros(1, b, c, w)).to(seq.dtype)"
    ).replace("requires_grad=seq.requires_grad)", "requires_grad=False).to(seq)")
    assert _found(cast) == []


def test_variable_of_an_index_stays_silent() -> None:
    body = """\
        from torch.autograd import Variable


        class Pick(nn.Module):
            def __init__(self, d):
                super().__init__()
                self.proj = nn.Linear(d, d)

            def forward(self, x):
                order = Variable(torch.randn(x.shape[0], device=x.device)).argsort()
                return self.proj(x[order])
        """
    assert _found(body) == []


# -- a constructor parameter defaulting to a module ------------------------------------------
RAMP = """\
    class Plan(nn.Module):
        def forward(self, count: int, device: torch.device) -> torch.Tensor:
            raise NotImplementedError()


    class Ramp(Plan):
        def __init__(self, top: float = 1.0):
            super().__init__()
            self.top = top

        def forward(self, count: int, device: torch.device) -> torch.Tensor:
            return torch.linspace(self.top, 0.0, count, device=device)


    class Walk(nn.Module):
        def __init__(self, net: nn.Module, plan: Plan = Ramp()):
            super().__init__()
            self.net = net
            self.plan = plan

        def forward(self, x):
            levels = self.plan(x.shape[-1], device=x.device)
            return self.net(x) * levels
    """


def test_table_of_a_default_modules_forward_meeting_half_is_reported() -> None:
    assert _found(RAMP) == [(12, "HP101")]


def test_table_of_a_default_module_cast_by_its_caller_stays_silent() -> None:
    cast = RAMP.replace("device=x.device)\n", "device=x.device).to(x.dtype)\n")
    assert cast != RAMP and _found(cast) == []
    assert _found(RAMP.replace("* levels", "* levels[0].item()")) == []


# -- a per-batch condition -------------------------------------------------------------------
STEPS = """\
    class Sampler(nn.Module):
        def __init__(self, net, steps=8):
            super().__init__()
            self.net = net
            self.steps = steps

        def forward(self, z, cond):
            grid = torch.linspace(1.0, 0.0, self.steps, device=z.device)
            for s in grid:
                level = s * torch.ones(z.shape[0], device=z.device)
                z = z - self.net(z, cond, level)
            return z
    """


def test_per_batch_time_beside_the_half_state_into_a_network_is_reported() -> None:
    assert _found(STEPS) == [(10, "HP101")]


def test_per_batch_time_by_full_as_a_keyword_is_reported() -> None:
    body = """\
        class Flow(nn.Module):
            def __init__(self, estimator, steps=4):
                super().__init__()
                self.estimator = estimator
                self.steps = steps

            def forward(self, state):
                b = state.shape[0]
                for k in range(self.steps):
                    when = torch.full((b,), k / self.steps, device=state.device)
                    state = state + self.estimator(input=state, condition=when)
                return state
        """
    assert _found(body) == [(10, "HP101")]


def test_vectors_not_per_batch_or_without_half_beside_stay_silent() -> None:
    fixed = STEPS.replace("torch.ones(z.shape[0], ", "torch.ones(3, ")
    assert _found(fixed) == []
    alone = STEPS.replace("self.net(z, cond, level)", "self.net(None, None, level)")
    assert _found(alone) == []
    cast = STEPS.replace("device=z.device)\n", "device=z.device).to(z.dtype)\n")
    assert cast != STEPS and _found(cast) == []


# -- an upcast only on some devices ----------------------------------------------------------
LATTICE = """\
    class Lattice(nn.Module):
        def forward(self, acts):
            if not acts.is_cuda:
                acts = acts.float()
            acts = torch.log_softmax(acts, -1)
            return self.score(acts)

        def score(self, acts):
            b, t, v = acts.shape
            alpha = torch.zeros(b, t)
            alpha = alpha.to(acts.device)
            for i in range(1, t):
                alpha[:, i] = alpha[:, i - 1] + acts[:, i - 1, 0]
            return -alpha[:, -1]
    """


def test_lattice_meeting_values_upcast_only_on_the_cpu_is_reported() -> None:
    assert _found(LATTICE) == [(10, "HP101")]


def test_lattice_meeting_values_upcast_by_a_dtype_test_stays_silent() -> None:
    dtype = LATTICE.replace("if not acts.is_cuda:", "if acts.dtype != torch.float32:")
    assert dtype != LATTICE and _found(dtype) == []
    always = LATTICE.replace("if not acts.is_cuda:\n                acts", "acts")
    assert always != LATTICE and _found(always) == []


# -- a tensor made in another tensor's dtype -------------------------------------------------
COUNTS = """\
    class Pool(nn.Module):
        def __init__(self, d):
            super().__init__()
            self.lin = nn.Linear(d, d)

        def forward(self, x, slot):
            probs = self.lin(x).softmax(-1)
            n, v = probs.shape
            counts = torch.zeros(n, 1, dtype=probs.dtype, device=probs.device)
            unit = torch.ones((slot.size(0), 1), device=probs.device)
            counts.scatter_add_(0, slot.unsqueeze(1), unit)
            return probs / (counts + 1e-9)
    """


def test_fp32_source_added_into_a_counter_made_in_the_half_dtype_is_reported() -> None:
    assert _found(COUNTS) == [(10, "HP101")]


def test_source_in_the_counters_dtype_stays_silent() -> None:
    same = COUNTS.replace("1), device=probs.device)", "1), dtype=probs.dtype, device=probs.device)")
    assert same != COUNTS and _found(same) == []


def test_table_of_a_module_built_when_none_is_given_is_reported() -> None:
    given = RAMP.replace("plan: Plan = Ramp()", "plan: Plan | None = None")
    given = given.replace("self.plan = plan", "self.plan = plan or Ramp()")
    assert given.count("plan or Ramp()") == 1 and _found(given) == [(12, "HP101")]


def test_draw_meeting_only_a_0_dim_tensor_in_the_half_dtype_stays_silent() -> None:
    body = """\
        class Shuffle(nn.Module):
            def __init__(self, d):
                super().__init__()
                self.lin = nn.Linear(d, d)

            def forward(self, x):
                two = torch.tensor(2.0, dtype=x.dtype, device=x.device)
                keys = torch.randn(x.shape[0], device=x.device) * two.log()
                return self.lin(x[keys.argsort()])
        """
    assert _found(body) == []
