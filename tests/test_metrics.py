"""Each score equals its ACE.md formula, computed here element by element on a hand-made matrix."""

import math

import pytest
import torch

from acetui_core.basics.errors import UserError
from acetui_core.pruning.stats import ColumnStats
from acetui_core.run.config import RunConfig
from acetui_core.scores.metrics import METHODS, get_method, variance_term

W = torch.tensor([[1.0, -2.0, 0.5], [3.0, 0.25, -4.0]])
X = torch.tensor([[1.0, 2.0, -1.0], [0.5, -3.0, 2.0], [2.0, 0.0, 1.0], [-1.0, 1.0, 0.5]])  # T=4 tokens


def stats():
    s = ColumnStats(3, torch.device("cpu"))
    s.add(X[:2])
    s.add(X[2:].unsqueeze(0))  # batches of any shape feed the same accumulators
    return s


def opts(**kw):
    return RunConfig(model="m", method="ace", sparsity="0.5", **kw)


def col(j, power):
    return sum(X[t, j].item() ** power for t in range(X.shape[0]))


def C(i, j):
    d_out, d_in = W.shape
    column_rms = math.sqrt(sum(W[k, j].item() ** 2 for k in range(d_out)) / d_out)
    row_norm = math.sqrt(sum(W[i, k].item() ** 2 for k in range(d_in)))
    return abs(W[i, j].item()) / column_rms * row_norm


def V(j):
    T = X.shape[0]
    return 1 + col(j, 2) / T + col(j, 4) / T


def activation_scale(kind):
    """--varp-scale by hand: the RMS over every entry of X, or the largest |x|."""
    entries = [X[t, j].item() for t in range(X.shape[0]) for j in range(X.shape[1])]
    if kind == "rms":
        return math.sqrt(sum(x * x for x in entries) / len(entries))
    return max(abs(x) for x in entries) if kind == "max" else 1.0


def V_variant(j, scale, form):
    xs = [X[t, j].item() / activation_scale(scale) for t in range(X.shape[0])]
    if form == "inverse":  # the paper's E[1/(1 - x^2)], x^2 clamped at 0.99
        return sum(1 / (1 - min(x * x, 0.99)) for x in xs) / len(xs)
    return 1 + sum(x**2 for x in xs) / len(xs) + sum(x**4 for x in xs) / len(xs)


def expected(name, i, j, squared=False):
    w = abs(W[i, j].item())
    norm = math.sqrt(col(j, 2))
    lead = w * w if squared else w
    if name == "magnitude":
        return w
    if name == "wanda":
        return w * norm
    if name == "ria":
        col_sum = sum(abs(W[k, j].item()) for k in range(W.shape[0]))
        row_sum = sum(abs(W[i, k].item()) for k in range(W.shape[1]))
        return (w / col_sum + w / row_sum) * norm**0.5
    if name == "cosp":
        return w * norm * C(i, j)
    if name == "varp":
        return lead * V(j)
    if name == "ace":
        return lead * V(j) * C(i, j)
    if name == "wanda+varp":
        return expected("wanda", i, j) * V(j)
    if name == "ria+varp":
        return expected("ria", i, j) * V(j)
    raise KeyError(name)


def test_column_statistics_match_definitions():
    s = stats()
    assert s.tokens == 4
    for j in range(3):
        assert s.sq[j].item() == pytest.approx(col(j, 2))
        assert s.q[j].item() == pytest.approx(col(j, 4))
        assert s.e2[j].item() == pytest.approx(col(j, 2) / 4)
        assert s.e4[j].item() == pytest.approx(col(j, 4) / 4)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_column_sums_leave_the_models_activations_as_they_were(dtype):
    """The sums square a float64 copy in place: an input already in float64 is not squared with it; the
    sums of x, x^2, x^4 and X^T X are the definitions'."""
    x = X.to(dtype)
    before = x.clone()
    s, sq, q, x2_max, tokens, xtx = ColumnStats.column_sums(x, gram=True)
    assert torch.equal(x, before)
    exact = x.double()
    assert torch.equal(s, exact.sum(0)) and torch.equal(sq, (exact * exact).sum(0))
    assert torch.equal(q, (exact**4).sum(0)) and x2_max.item() == 9.0 and tokens == 4
    assert torch.equal(xtx, exact.t() @ exact)


@pytest.mark.parametrize("name", ["magnitude", "wanda", "ria", "cosp", "varp", "ace", "wanda+varp", "ria+varp"])
def test_score_equals_formula(name):
    scores = METHODS[name].score(W, stats(), opts())
    for i in range(2):
        for j in range(3):
            assert scores[i, j].item() == pytest.approx(expected(name, i, j), rel=1e-5), (name, i, j)


@pytest.mark.parametrize("name", ["varp", "ace"])
def test_squared_weight_variant(name):
    scores = METHODS[name].score(W, stats(), opts(squared_weight=True))
    for i in range(2):
        for j in range(3):
            assert scores[i, j].item() == pytest.approx(expected(name, i, j, squared=True), rel=1e-5)


@pytest.mark.parametrize("scale", ["none", "rms", "max"])
@pytest.mark.parametrize("form", ["series", "inverse"])
@pytest.mark.parametrize("name", ["varp", "ace", "wanda+varp", "ria+varp"])
def test_varp_variants_equal_their_formulas(name, scale, form):
    """Each --varp-scale x --varp-form, by hand: V_j is replaced by its variant in every score that reads it."""
    s = stats()
    if form == "inverse":  # the pipeline gathers a second pass with the scale the first one measured
        assert s.scale(scale) == pytest.approx(activation_scale(scale), rel=1e-6)
        s = ColumnStats(3, torch.device("cpu"), inverse_scale=s.scale(scale))
        s.add(X)
    scores = METHODS[name].score(W, s, opts(varp_scale=scale, varp_form=form))
    for i in range(2):
        for j in range(3):
            want = expected(name, i, j) / V(j) * V_variant(j, scale, form)
            assert scores[i, j].item() == pytest.approx(want, rel=1e-5), (name, scale, form, i, j)


def test_default_variance_term_is_unchanged():
    """The defaults (scale none, series) are ACE.md's V_j = 1 + E[x^2] + E[x^4], bit for bit."""
    s = stats()
    assert torch.equal(variance_term(s, opts()), 1 + s.e2 + s.e4)


def test_cosine_row_factor_only_matters_across_rows():
    """sqrt(sum_j W_ij^2) is constant along a row: it rescales whole rows of the CosP score."""
    scaled = W.clone()
    scaled[0] *= 10
    a = METHODS["cosp"].score(W, stats(), opts())
    b = METHODS["cosp"].score(scaled, stats(), opts())
    assert torch.equal(a[1].argsort(), b[1].argsort())
    assert not torch.allclose(a[0] / a[1].max(), b[0] / b[1].max())


def test_variance_term_is_not_the_singular_series():
    """V_j = 1 + E[x^2] + E[x^4] stays finite where the paper's E[1/(1-x^2)] would blow up (|x| >= 1)."""
    scores = METHODS["varp"].score(W, stats(), opts())
    assert torch.isfinite(scores).all()


def test_unknown_method_is_one_sentence():
    with pytest.raises(UserError, match="Unknown method 'bogus'; choose one of: magnitude, wanda"):
        get_method("bogus")


@pytest.mark.parametrize("name", ["cosp", "ace"])
def test_all_zero_column_scores_zero_not_nan(name):
    """An all-zero column has column RMS 0: C's 0/0 must not poison the ranking with NaN."""
    Wz = W.clone()
    Wz[:, 1] = 0
    scores = METHODS[name].score(Wz, stats(), opts())
    assert torch.isfinite(scores).all() and (scores[:, 1] == 0).all()
