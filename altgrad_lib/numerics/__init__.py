"""Layer 1, numerics: what a number format is and how a tensor is put on its grid. Pure maths on tensors; knows
nothing of models, training or runs.

    formats.py       FloatFormat (every convention a validated field), get_format, grids, encode/decode, ULP, summary
    rounding.py      the rounding kernels: RNE, stochastic (seedable), toward zero; eager and fused bit-pattern kernels
    mt_bits.py       torch.randint's Mersenne Twister bits for SR, bit for bit, drawn in C (built once; else torch)
    scaling.py       per-tensor current / delayed, per-row and per-block (MX, E8M0) scaling; Scaler state as buffers
    formats_wide.py  BF16 / FP16 storage grids (data only; get_format builds them, not in the registry)
    formats_block.py block formats' element and scale grids (INT4 / INT8 elements, UE5M3 scales; data, as formats_wide)
    formats_tables.py  a format's convention and code-grid tables (FormatTables, mixed into FloatFormat), show_number
    block_scaling.py NVFP4 (E4M3 block + FP32 tensor scales, 1x16 / 16x16) and MX (E8M0, FLOOR / RCEIL) blocks
    quant_spec.py    QuantSpec: what one fake-quantization point simulates (format, scaling, rounding, STE), validated
    accumulate.py    accumulator precision inside a GEMM (AccumSpec): a narrow running sum, per add or per chunk,
                     FP32 promotion every N products
    quant.py         differentiable fake_quant, straight-through estimators (its qdq shared with Quantizer); sqnr_db
    quantizer.py     Quantizer, the stateful fake-quant module: Scaler, compile-traceable SR RNG, counters, observers
    kernels.py       compiled quantize-dequantize kernels for eager quantizers (one torch.compile'd function per
                     configuration; modes auto / compiled / eager / dynamo)
    kernel_direct.py DirectKernel: such a kernel called without dynamo's per-call lookup once a signature is known
    grid.py          the grid of one weight tensor (fixed power-of-two scale), ULP in a step's direction, stiffness
    grid_metrics.py  grid geometry between steps: codes, stall rate, Δcode, bit flips, code usage, misalignment
    anatomy.py       what notebook 01 shows of a format: binades, value density, rounding error, SR bias / variance
    counter_rng.py   SR random bits as a hash of (seed, element index): fused into compiled code, resumable from one
                     integer (optimizer storage SR, per-call operand SR, per-step Hadamard signs)
    matrix.py        Newton–Schulz, msign (polar / NS) and its error bound, the Stiefel scale, constraint residuals
                     (shared by optim/muon.py and monitors/manifold.py)
    oracles.py       independent references (torch / ml_dtypes dtypes, gfloat) in our conventions; agreement tables
"""
