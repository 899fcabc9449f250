"""Layer 2, quantize: a model's linear layers in a format. Which layer gets which QuantSpec per role (recipes), the
quantized linear itself, the model surgery that swaps it in, and the hardware FP8 peers.

    recipes.py     LayerSpec, QuantPolicy and the named recipes (hp, fp8_hybrid, fmt:ExMy, per-layer maps), get_policy
    block_recipes.py  nvfp4 / mxfp4 / mxfp8 / mxfp6 and their switches ("nvfp4:disable_rht:hp_last=1")
    linear.py      QuantizedLinear: X, W fake-quantized in the forward, dY in the backward
    gemm_quant.py  GEMM-faithful operands: fprop / dgrad / wgrad each quantized along its own reduction dim; RHT
    gemm_overrides.py  per-GEMM operand specs (gemm.overrides): a QuantSpec (own Quantizer) or hp per GEMM operand
    convert.py     quantize_model / quantized_modules: swap nn.Linear per layer class, the table of what is where
    attention.py   AttnSpec / QuantizedAttention: the attention core (Q·Kᵀ, P·V) at TE's FP8-attention quantizer points
    hw_fp8.py      peer paths for E4M3/E5M2: torchao float8 training and a torch._scaled_mm linear
    layer_sqnr.py  per-layer SQNR of a quantized model against its FP32 twin (output, dX, dW)
    faults.py      faults injected into one GEMM (gain, correlated SR, swapped block scales, few-bit SR): the doctor's
                   proof (`altgrad doctor --inject`)
    fidelity.py    `altgrad fidelity RECIPE`: each GEMM operand's quantization against torch / ml_dtypes / gfloat /
                   torchao or a hand reference from the paper, the SR Monte-Carlo, what stays high precision or is
                   not simulated (fidelity_text.py: its text)

model.py (beside this package, the same layer) is the GPT these recipes are applied to.
"""
