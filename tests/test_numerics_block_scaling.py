"""Block scaling (altgrad_lib.numerics.block_scaling) bit-exact against torchao's pure-PyTorch NVFP4 and MX code:
NVFP4Tensor.to_nvfp4(x, per_tensor_scale=amax/(448·6)).dequantize() and MXTensor.to_mx(...).dequantize()
(both run on CPU), on random, outlier-heavy, subnormal-heavy and zero-block tensors; plus the edge cases
where we differ from torchao on purpose (amax 0, exact E8M0 exponents) and the 16×16 tiles."""
from __future__ import annotations

import math
import warnings

import pytest
import torch
from helpers import assert_same

from altgrad_lib.numerics.block_scaling import BlockScaling, _f32_exponent, block_qdq, block_scales, mx_exponents
from altgrad_lib.numerics.formats import get_format
from altgrad_lib.numerics.oracles import mx_reference, torchao_nvfp4, torchao_nvfp4_2d

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from torchao.prototype.mx_formats.config import ScaleCalculationMode
    from torchao.prototype.mx_formats.mx_tensor import MXTensor

E2M1 = get_format("E2M1")
TORCHAO_MX = {"E4M3": torch.float8_e4m3fn, "E5M2": torch.float8_e5m2, "E2M3": "fp6_e2m3", "E3M2": "fp6_e3m2",
              "E2M1": torch.float4_e2m1fn_x2}
TORCHAO_MODE = {"floor": ScaleCalculationMode.FLOOR, "rceil": ScaleCalculationMode.RCEIL}


def tensor(kind: str, rows: int = 48, cols: int = 256, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, cols, generator=g)
    if kind == "random":
        return x * torch.exp2(torch.randint(-10, 10, (rows, 1), generator=g).float())
    if kind == "outliers":        # a few elements 10^3-10^5 x the rest: most blocks far below the tensor amax
        mask = torch.rand(rows, cols, generator=g) < 0.01
        return torch.where(mask, x * 10.0 ** torch.randint(3, 6, (rows, cols), generator=g).float(), x)
    if kind == "subnormal":       # wide range inside each block: many elements land on E2M1's 0.5 / 0 and
        # whole blocks at 1e-6 of the amax hit the E4M3 scale floor (2^-6) of NVFP4
        x = x * torch.exp2(-torch.randint(0, 12, (rows, cols), generator=g).float())
        return x * torch.where(torch.rand(rows, cols // 16, generator=g) < 0.3, 1e-6, 1.0).repeat_interleave(16, 1)
    if kind == "zero_blocks":     # all-zero blocks and rows inside a nonzero tensor
        x[::3] = 0
        x[:, 32:96] = 0
        return x
    raise ValueError(kind)


KINDS = ("random", "outliers", "subnormal", "zero_blocks")


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_nvfp4_1x16_bit_exact_vs_torchao(kind, dtype):
    x = tensor(kind).to(dtype)
    y, _, _ = block_qdq(x, E2M1, BlockScaling("nvfp4"))
    assert y.dtype == dtype
    assert_same(y, torchao_nvfp4(x), x, f"nvfp4 1x16 {kind} {dtype}")


@pytest.mark.parametrize("kind", KINDS)
def test_nvfp4_16x16_bit_exact_vs_torchao_composition(kind):
    """torchao has no pure-PyTorch 16x16 path; oracles.torchao_nvfp4_2d composes it from the 1x16 path."""
    x = tensor(kind, rows=64)
    ref = torchao_nvfp4_2d(x)
    y, _, _ = block_qdq(x, E2M1, BlockScaling("nvfp4", tile_2d=True))
    assert_same(y, ref, x, f"nvfp4 16x16 {kind}")
    # row-wise and column-wise copies of a 2D-quantized weight agree (TE's reason for 2D weights)
    yt, _, _ = block_qdq(x.t().contiguous(), E2M1, BlockScaling("nvfp4", tile_2d=True))
    assert torch.equal(yt.t(), y)
    # and 16x16 really differs from 1x16 on this data (the composition is not vacuous)
    assert not torch.equal(y, block_qdq(x, E2M1, BlockScaling("nvfp4"))[0])


@pytest.mark.parametrize("tile_2d", [False, True])
def test_nvfp4_all_zero_and_ragged_without_nan(tile_2d):
    cfg = BlockScaling("nvfp4", tile_2d=tile_2d)
    z = torch.zeros(20, 40)
    y, _, _ = block_qdq(z, E2M1, cfg)
    assert torch.equal(y, z) and not torch.signbit(y).any()
    # torchao's to_nvfp4 divides 0 by a per-tensor scale of 0 here (NaN): we use s_global = 1 instead
    assert torch.isnan(torchao_nvfp4(torch.zeros(16, 32))).all()
    # fp32 subnormal amax: s_global is floored so 1/s_global stays finite
    tiny = torch.full((16, 32), 1e-44)
    assert torch.isfinite(block_qdq(tiny, E2M1, cfg)[0]).all()
    # ragged shape (20 x 40: padded blocks/tiles) equals quantizing the zero-padded tensor and cropping
    x = tensor("random", rows=20, cols=40)
    xp = torch.nn.functional.pad(x, (0, 8, 0, 12))
    assert torch.equal(block_qdq(x, E2M1, cfg)[0], block_qdq(xp, E2M1, cfg)[0][:20, :40])


@pytest.mark.parametrize("fmt_name", list(TORCHAO_MX))
@pytest.mark.parametrize("mode", ["floor", "rceil"])
@pytest.mark.parametrize("kind", KINDS)
def test_mx_bit_exact_vs_torchao(fmt_name, mode, kind):
    x = tensor(kind)
    fmt = get_format(fmt_name)
    ref = MXTensor.to_mx(x, TORCHAO_MX[fmt_name], 32, scaling_mode=TORCHAO_MODE[mode]).dequantize(torch.float32)
    y, _, _ = block_qdq(x, fmt, BlockScaling("mx", mode=mode))
    assert_same(y, ref, x, f"mx {fmt_name} {mode} {kind}")
    yb, _, _ = block_qdq(x.bfloat16(), fmt, BlockScaling("mx", mode=mode))
    refb = MXTensor.to_mx(x.bfloat16(), TORCHAO_MX[fmt_name], 32,
                          scaling_mode=TORCHAO_MODE[mode]).dequantize(torch.bfloat16)
    assert_same(yb, refb, x, f"mx {fmt_name} {mode} {kind} bf16")


@pytest.mark.parametrize("fmt_name", ["E3M4", "E1M6", "E6M1", "E2M5", "E4M3"])
@pytest.mark.parametrize("mode", ["floor", "rceil"])
def test_mx_exotic_elements_vs_hand_reference(fmt_name, mode):
    x = tensor("outliers", rows=8)
    fmt = get_format(fmt_name)
    y, _, _ = block_qdq(x, fmt, BlockScaling("mx", mode=mode))
    assert_same(y, mx_reference(x, fmt, mode), x, f"mx {fmt_name} {mode}")


def test_f32_exponent_matches_math_frexp_on_every_fp32_class():
    """floor(log2 t) and "not a power of two" against Python's math.frexp (the C library's, on the exact double of
    each fp32 value): zero, subnormals (smallest, largest, powers of two and not), normals, the fp32 max; inf and
    NaN keep the exponent bits' reading (128; NaN is no power of two)."""
    tiny = 2.0**-149
    vals = [0.0, tiny, 2 * tiny, 3 * tiny, 2.0**-130, 2.0**-130 * 1.5, 2.0**-126 - tiny, 2.0**-126, 1.0, 1.5,
            2.0**100 * 1.25, float(torch.finfo(torch.float32).max), math.inf, math.nan]
    g = torch.Generator().manual_seed(0)
    rnd = torch.rand(2000, generator=g) * torch.exp2(torch.randint(-149, 128, (2000,), generator=g).float())
    t = torch.cat([torch.tensor(vals, dtype=torch.float32), rnd.float()])
    e, not_pow2 = _f32_exponent(t)

    def ref(v: float) -> tuple[int, bool]:
        if v == 0:
            return -127, False
        if not math.isfinite(v):
            return 128, math.isnan(v)
        m, ex = math.frexp(v)
        return ex - 1, m != 0.5

    want = [ref(v) for v in t.tolist()]
    assert e.tolist() == [w[0] for w in want]
    assert not_pow2.tolist() == [w[1] for w in want]


def test_mx_exponents_exact_where_torchao_cpu_log2_rounds_down():
    """RCEIL is ceil(log2(amax/fmax)); torchao's CPU fallback takes torch.log2 in fp32, which returns the
    integer k for amax/fmax = 2^k (1 + 2^-23) once k is large enough: one exponent too low (then its clamp
    saturates the block's largest element). Ours computes the exponent exactly."""
    fmt = get_format("E4M3")
    d = torch.tensor(2.0**20, dtype=torch.float32)
    d = torch.nextafter(d, torch.tensor(math.inf))                  # 2^20 (1 + 2^-23)
    amax = (d.double() * 448).float()
    assert float(amax / 448) == float(d)                            # fp32 division lands on d
    assert int(mx_exponents(amax.reshape(1), fmt, "rceil")) == 21
    assert math.ceil(float(torch.log2(d))) == 20                    # the fp32 log2 shortcut
    x = torch.zeros(1, 32)
    x[0, 0] = amax
    y, _, _ = block_qdq(x, fmt, BlockScaling("mx", mode="rceil"))
    ref = MXTensor.to_mx(x, torch.float8_e4m3fn, 32, scaling_mode=ScaleCalculationMode.RCEIL).dequantize(torch.float32)
    assert float(y[0, 0]) == float(fmt.quantize(amax / 2**21)) * 2**21      # no saturation: 448·(1+2^-23)/2
    assert float(ref[0, 0]) == 448 * 2**20                                   # torchao: saturated at 448·2^20


def test_mx_floor_tiny_blocks_use_one_scale_both_ways():
    """FLOOR with block amax < 2^(emax_elem - 126): e clamps to -127. We quantize and dequantize with 2^-127;
    torchao quantizes with 2^-126 (its fp32-normal floor) but dequantizes with 2^-127, halving the block."""
    x = torch.zeros(1, 32)
    x[0, :4] = torch.tensor([2.0**-120, -(2.0**-121), 1.5 * 2.0**-122, 2.0**-125])
    fmt = get_format("E4M3")
    y, _, _ = block_qdq(x, fmt, BlockScaling("mx"))
    assert torch.equal(y, x)                                            # all exactly representable
    ref = MXTensor.to_mx(x, torch.float8_e4m3fn, 32).dequantize(torch.float32)
    assert torch.equal(ref, x / 2)


def test_block_stats_and_scales():
    x = torch.zeros(2, 32)
    x[0, 0], x[0, 1] = 6.0 * 2**10, 0.01           # 0.01 underflows next to 6144 in E2M1 (MX scale 2^10)
    y, n_sat, n_under = block_qdq(x, E2M1, BlockScaling("mx"), want_stats=True)
    assert int(n_under) == 1 and int(n_sat) == 0 and float(y[0, 0]) == 6144.0
    s = block_scales(x, E2M1, BlockScaling("mx"))
    assert s.tolist() == [2.0**10, 2.0**-127]
    sn = block_scales(x, E2M1, BlockScaling("nvfp4"))
    assert sn.shape == (4,) and float(sn[0]) == pytest.approx(1024.0)


def test_block_scaling_config_validation():
    assert BlockScaling("nvfp4").block_size == 16 and BlockScaling("mx").block_size == 32
    assert BlockScaling.from_dict({"kind": "mx", "mode": "rceil"}).short_str() == "mx32r"
    assert BlockScaling("nvfp4", tile_2d=True).short_str() == "nv16x16"
    for kwargs, needle in [({"kind": "nv"}, "'nv'.*nvfp4.*mx"), ({"kind": "mx", "mode": "even"}, "even.*floor"),
                           ({"kind": "mx", "tile_2d": True}, "tile_2d"), ({"block_size": -1}, "block_size=-1")]:
        with pytest.raises(ValueError, match=needle):
            BlockScaling(**kwargs)
    with pytest.raises(ValueError, match="unknown BlockScaling key.*tile.*valid keys"):
        BlockScaling.from_dict({"kind": "nvfp4", "tile": 2})


def test_sr_headroom_keeps_mx_fp4_stochastic_rounding_unbiased():
    """MX FLOOR puts a block's |x|/X in [4, 8): above 6 E2M1 saturates, so SR is biased there. With Tseng et
    al.'s 3/4 headroom the block lands in [3, 6) and the mean of many SR draws converges to x."""
    torch.manual_seed(0)
    x = torch.zeros(1, 32)
    x[0, 0], x[0, 1] = 7.0, 0.3                       # amax 7: X = 1, 7 > 6 saturates without headroom
    n = 4000
    xs = x.repeat(n, 1)
    plain, _, _ = block_qdq(xs, E2M1, BlockScaling("mx"), rounding="stochastic")
    head, n_sat, _ = block_qdq(xs, E2M1, BlockScaling("mx", headroom=0.75), rounding="stochastic", want_stats=True)
    assert int(n_sat) == 0
    assert float(plain[:, 0].mean()) == 6.0                                  # always saturated: bias -1
    se = float(head[:, 1].std()) / n**0.5                                    # standard error of the mean
    assert abs(float(head[:, 0].mean()) - 7.0) < 4 * float(head[:, 0].std()) / n**0.5 + 1e-6
    assert abs(float(head[:, 1].mean()) - 0.3) < 4 * se
    with pytest.raises(ValueError, match="headroom=1.5"):
        BlockScaling("mx", headroom=1.5)


@pytest.mark.parametrize("cfg", [BlockScaling("mx"), BlockScaling("nvfp4"), BlockScaling("nvfp4", tile_2d=True)],
                         ids=lambda c: c.short_str())
def test_block_flush_stats_match_a_loop_over_blocks(cfg):
    """Per-block flush fractions against a plain loop over the blocks (tiles) by slicing, which handles the
    partial last block (40 = 32 + 8 columns, 20 = 16 + 4 rows) without padding."""
    from altgrad_lib.numerics.block_scaling import block_flush_stats
    g = torch.Generator().manual_seed(5)
    x = torch.randn(20, 40, generator=g) * torch.exp2(torch.randint(-12, 4, (20, 40), generator=g).float())
    x[3, :] = 0.0                                     # zeros before quantization are not flushes
    y, _, n_under = block_qdq(x, E2M1, cfg, want_stats=True)
    b = cfg.block_size
    fr = []
    for r0 in range(0, 20, b if cfg.tile_2d else 1):
        for c0 in range(0, 40, b):
            xs, ys = x[r0:r0 + (b if cfg.tile_2d else 1), c0:c0 + b], y[r0:r0 + (b if cfg.tile_2d else 1), c0:c0 + b]
            fr.append(float(((xs != 0) & (ys == 0)).sum()) / xs.numel())
    ref = torch.tensor(fr, dtype=torch.float64)
    st = block_flush_stats(x, y, cfg)
    assert int(n_under) > 0 and float(ref.max()) > float(ref.mean()) > 0   # the tensor does flush, unevenly
    assert float(st["blk_flush_mean"]) == pytest.approx(float(ref.mean()), rel=1e-12)
    assert float(st["blk_flush_std"]) == pytest.approx(float(ref.std()), rel=1e-12)
    assert float(st["blk_flush_max"]) == float(ref.max())
    assert float(st["blk_flush_any"]) == pytest.approx(float((ref > 0).double().mean()), rel=1e-12)
