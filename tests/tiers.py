"""Which tests belong to which tier, in one table (docs/lanes.md, "Tiers").

``tests/conftest.py`` adds the markers below to the tests named here; a test is named by its
module (``tests/x/test_y.py``: every test in it) or by its function
(``tests/x/test_y.py::test_z``: every parametrisation of it). Markers:

- ``smoke``: a few tests per kernel family, each checked against its reference. With the
  device-free modules (``fast``) they make ``make test-fast``; on the device-only lane they
  run every kernel family once at 8-wide subgroups, where kernels take other tiles and paths.
- ``fast``: unit tests that need no device or take a second or two (``make test-fast``).
- ``transfers``: tests whose data crosses between host and device through the paths a
  discrete GPU takes (uploads, read-backs, staging, DLPack, transfer streams, views at
  offsets, captured graphs fed new inputs, the models and importers end to end). The
  device-only lane (``VKUMD_DEVICE_ONLY_MEMORY=1``) runs these and the smoke tests only.
- ``hardened``: endurance and abuse: the short soak, fuzzing (``--fuzz-scale`` multiplies
  its examples), exhaustion, fault injection, the bad-input corpus, threads
  (``make test-hardened``; the main lane runs them too, at scale 1).

A new test file that moves data between host and device belongs in ``TRANSFERS``; a new
kernel family gets an entry in ``SMOKE``.
"""

from __future__ import annotations

# Each kernel family's central reference checks; at 8 lanes on the device-only lane these
# are the tests that see the narrower subgroup's tiles, keys per tile and reduction paths.
SMOKE: dict[str, str] = {
    "tests/framework/test_elementwise.py::test_one_pipeline_serves_every_shape": "binary",
    "tests/framework/test_elementwise.py::test_broadcasts_longer_than_one_pass_of_the_grid":
        "binary broadcast",
    "tests/framework/test_elementwise.py::test_large_tensors_use_the_two_dimensional_grid":
        "binary, 2-D grid",
    "tests/framework/test_elementwise.py::test_copy_is_bit_exact": "copy",
    "tests/framework/test_elementwise.py::test_cast_to_bfloat16_rounds_to_nearest_even": "cast",
    "tests/framework/test_float8.py::test_cast_to_float8_on_device": "cast to float8",
    "tests/framework/test_packed.py::test_cast_floats_to_packed_on_device":
        "packed_cast (to the packed types)",
    "tests/framework/test_qlinear.py::test_quantize_matches_the_reference":
        "quantize_linear (qlinear)",
    "tests/framework/test_elementwise.py::test_int32_division_rounds_as_asked": "int32 division",
    "tests/framework/test_binary_vector.py::test_views_at_offsets_off_the_pool_alignment":
        "binary vector variant",
    "tests/framework/test_unary_vector.py::test_cast_and_fill_through_the_ops":
        "cast, fill, scale vector variants",
    "tests/framework/test_unary_vector.py::test_concatenation_copies_vectors_into_the_slice":
        "copy vector variant",
    "tests/framework/test_fused_vector.py::test_views_at_offsets_off_the_pool_alignment":
        "fused elementwise vector variant",
    "tests/framework/test_fused_elementwise.py::test_a_chain_matches_the_reference":
        "fused elementwise",
    "tests/framework/test_fused_elementwise.py::test_eight_inputs_with_their_own_broadcasts":
        "fused elementwise, most inputs",
    "tests/framework/test_activation.py::test_negative_tail_per_element": "activations",
    "tests/framework/test_generated_ops.py::test_compiled_graph_matches_float64":
        "generated one-input kernels (exp, sqrt, tanh, erf, sigmoid, hardswish, ...)",
    "tests/framework/test_activation.py::test_large_tensor_uses_a_2d_grid": "activations, 2-D",
    "tests/framework/test_softmax.py::test_reduction_paths": "softmax, every reduction path",
    "tests/framework/test_log_softmax.py::test_reduction_paths":
        "log_softmax, every reduction path",
    "tests/framework/test_scan.py::test_matches_float64": "cumsum and cumprod (scan)",
    "tests/framework/test_float64_math.py::test_op_matches_numpy_in_double":
        "float64 unary math (unary_double)",
    "tests/framework/test_float64_axis.py::test_scans":
        "float64 along an axis (axis_double)",
    "tests/framework/test_float64_matmul.py::test_matmul_matches_numpy":
        "float64 matmul (matmul_double)",
    "tests/framework/test_topk.py::test_topk_matches_a_stable_sort": "topk",
    "tests/framework/test_topk.py::test_hardmax_is_the_first_maximum": "hardmax (topk kernel)",
    "tests/framework/test_losses.py::test_matches_float64": "nll_loss",
    "tests/framework/test_norm.py::test_reduction_paths": "layer and RMS norm, every path",
    "tests/framework/test_reduce.py::test_reduction_paths": "sum, mean, max, every path",
    "tests/framework/test_layout.py::test_transpose": "transpose",
    "tests/framework/test_layout.py::test_embedding": "embedding",
    "tests/framework/test_matmul.py::test_matches_float64_reference": "GEMM tiles",
    "tests/framework/test_matmul.py::test_lanes_load_variants": "GEMM per-lane loads",
    "tests/framework/test_matmul.py::test_full_epilogue": "GEMM epilogue",
    "tests/framework/test_matmul.py::test_int8": "int8 GEMM",
    "tests/framework/test_attention.py::test_tiled_float32": "attention, keys per tile",
    "tests/framework/test_attention.py::test_tiled_float16": "attention, float16",
    "tests/framework/test_attention.py::test_decode_path": "attention, decode",
    "tests/framework/graph/test_fusion_norm.py": "fused residual + norm (add_norm)",
    "tests/framework/test_rope.py::test_matches_float64": "rotary embedding",
    "tests/framework/test_rope.py::test_large_positions_keep_float32_accuracy":
        "rotary embedding, fixed-point angle reduction",
    "tests/framework/test_kv_write.py::test_writes_each_slot_at_its_position": "KV cache write",
    "tests/framework/test_kv_write.py::test_graph_reads_the_cache_it_wrote":
        "KV cache write in a graph, attention over it",
    "tests/framework/test_argmax.py::test_ties_nan_and_infinities": "argmax, every path",
    "tests/framework/test_argmin.py::test_ties_nan_and_infinities": "argmin, last index",
    "tests/framework/test_reduce_axes.py::test_last_axis_every_row_path": "reductions, rows",
    "tests/framework/test_reduce_axes.py::test_16_bit_types": "reduce_axis, middle axes",
    "tests/framework/test_generated_ops.py::test_binary_eager_matches_float64":
        "generated two-input kernels (swiglu)",
    "tests/framework/test_qmatmul.py::test_matches_float64":
        "quantized matmul (Q8_0, Q4_0, Q4_1), both paths",
    "tests/framework/test_qmatmul.py::test_qembedding_rows_and_out_of_range_ids":
        "quantized embedding",
    "tests/framework/test_conv.py::test_matches_float64": "direct convolution",
    "tests/framework/test_conv.py::test_depthwise_bands":
        "depthwise convolution",
    "tests/framework/test_conv_epilogue.py::test_every_path_applies_the_epilogue":
        "convolution epilogue, every path",
    "tests/framework/test_pool.py::test_matches_float64": "max and average pooling",
    "tests/framework/test_batch_norm.py::test_matches_float64": "inference batch norm",
    "tests/framework/test_lrn.py::test_matches_float64": "local response normalisation",
    "tests/framework/test_resample.py::test_resize_float16": "resize, nearest and bilinear",
    "tests/framework/test_resample.py::test_pad_matches_numpy": "pad, every mode",
    "tests/framework/test_resample.py::test_conv_transpose_matches_float64":
        "transposed convolution",
    "tests/framework/test_recurrent.py::test_matches_float64": "LSTM and GRU cell, its GEMMs",
    "tests/framework/test_gathers.py::test_gather_elements": "gather_elements",
    "tests/framework/test_gathers.py::test_gather_nd": "gather_nd",
    "tests/framework/test_gathers.py::test_trilu": "trilu",
    "tests/framework/test_scatters.py::test_scatter_elements": "scatter_elements, reductions",
    "tests/framework/test_scatters.py::test_scatter_nd": "scatter_nd, reductions",
    "tests/framework/test_rnn.py::test_each_step_path": "RNN cell, both step projections",
    "tests/framework/test_resize_modes.py::test_cubic_float16": "resize, bicubic",
    "tests/framework/test_grid_sample.py::test_2d_matches_float64": "grid_sample, 2-D",
}

# Device-free modules, or ones that take a second or two, for the fast tier.
FAST: dict[str, str] = {
    "tests/test_layers.py": "import layering, module sizes",
    "tests/test_docs.py": "README's variables",
    "tests/test_settings.py": "settings parsing",
    "tests/test_tiers.py": "the tier tables name real tests",
    "tests/test_numerics.py": "the shared numerical checks",
    "tests/vk/test_errors.py": "VkResult to exceptions",
    "tests/compiler/test_glslang.py": "the shader compiler",
    "tests/compiler/test_push_layouts.py": "push layouts against SPIR-V",
    "tests/compiler/test_spirv_val.py": "spirv-val on every kernel",
    "tests/framework/graph/test_graph_ir.py": "graph IR",
    "tests/framework/graph/test_graph_dims.py": "symbolic dims",
    "tests/framework/graph/test_symbolic_windows.py": "symbolic sizes through strided windows",
    "tests/framework/graph/test_graph_shapes.py": "shape rules",
    "tests/framework/graph/test_graph_memory.py": "memory planner",
    "tests/framework/graph/test_graph_passes.py": "passes",
    "tests/framework/graph/test_graph_reference.py": "float64 reference",
    "tests/framework/graph/test_graph_layering.py": "graph stays device-free",
    "tests/framework/graph/test_fusion_elementwise.py": "fusion rules",
    "tests/framework/graph/test_execute_hazards.py": "executor barriers",
    "tests/framework/graph/test_trace.py": "tracing",
    "tests/framework/graph/test_trace_errors.py": "tracing errors",
    "tests/framework/models/test_safetensors.py": "weights loader",
    "tests/framework/models/test_gguf.py": "GGUF reader and block decoding",
    "tests/framework/models/test_llama_config.py": "Llama config and weight loaders",
    "tests/framework/models/test_llama_tokenizer.py": "GGUF tokenizer and chat templates",
    "tests/framework/models/test_llama_reference.py": "the float64 Llama reference",
    "tests/framework/models/test_sampling.py": "token sampling",
    "tests/framework/models/test_scheduler.py": "continuous batching over a fake model",
    "tests/framework/models/test_generation.py": "TextGenerator over a fake model",
    "tests/framework/models/test_cli_generate.py": "vkumd generate and chat over a fake model",
    "tests/framework/models/test_ocr_boxes.py": "OCR geometry: components, boxes, CTC",
    "tests/frontends/test_ir_math_ops.py": "frontend IR math",
    "tests/frontends/test_onnx_conformance_counts.py": "the conformance harness's counting on "
                                                       "six built cases; the docs table",
    "tests/framework/test_tensor.py": "upload and read back every dtype",
    "tests/runtime/test_dispatch.py": "one dispatch end to end",
    "tests/runtime/test_launch.py": "launch plans",
    "tests/serve/test_batcher.py": "the server's batcher, settings and request checks",
}

TRANSFERS: dict[str, str] = {
    "tests/framework/test_host_steps.py": "host steps: read back, numpy, upload",
    "tests/framework/test_tensor.py": "upload and read back, every dtype and shape",
    "tests/framework/test_views.py": "views at offsets, slices, split and concat, DLPack",
    "tests/framework/test_float8.py": "float8 tensors uploaded and read back as float32",
    "tests/framework/test_packed.py": "packed tensors uploaded packed and read back unpacked",
    "tests/framework/test_bitcast.py": "bitcast views read back as the other type",
    "tests/runtime/test_device_only_memory.py": "the staging paths themselves",
    "tests/runtime/test_memory.py": "which memory tensors live in, mapped or not",
    "tests/runtime/test_lifetime.py": "staging and DLPack memory outliving tensors",
    "tests/runtime/test_streams.py": "transfer streams, writes on a stream, read-back waits",
    "tests/runtime/test_capture.py": "new inputs written into captured tensors",
    "tests/runtime/test_capture_rules.py": "writes and reads refused inside a capture",
    "tests/runtime/test_exhaustion.py": "staging memory under a memory limit",
    "tests/runtime/test_eager_path.py": "eager ops with uploads between them",
    "tests/runtime/test_threads.py": "uploads and read-backs from several threads",
    "tests/framework/graph/test_execute_memory.py": "the arena read back through staging",
    "tests/framework/graph/test_execute_buckets.py": "bucket inputs written, outputs read",
    "tests/framework/graph/test_compile_e2e.py": "compiled functions end to end",
    "tests/framework/execute/test_bound_inputs.py": "inputs bound to a compiled graph",
    "tests/framework/execute/test_given_weights.py": "weights the caller holds, read in place",
    "tests/framework/execute/test_threads_compiled.py": "compiled calls from threads, each "
                                                        "result read back",
    "tests/framework/models/test_encoder.py": "the sentence encoder end to end",
    "tests/framework/models/test_bert_graph.py": "the BERT graph end to end",
    "tests/framework/models/test_llama_runner.py": "the Llama runner: prefill, recorded decode",
    "tests/framework/models/test_llama_tiny_gguf.py": "a tiny GGUF Llama end to end",
    "tests/framework/models/test_llama_runner_smollm2.py": "SmolLM2 runner: 1-5 min",
    "tests/serve/test_generation_model.py": "the generation routes on a tiny GGUF end to end",
    "tests/framework/models/test_generation_model.py": "text generation end to end",
    "tests/framework/models/test_ocr.py": "the OCR pipeline on vkumd against onnxruntime",
    "tests/frontends/test_onnx_import.py": "ONNX models end to end",
    "tests/frontends/test_onnx_derived.py": "ONNX models with masks end to end",
    "tests/frontends/test_onnx_vision.py": "ONNX vision nodes end to end",
    "tests/frontends/test_onnx_symbolic_sizes.py": "an ONNX conv net at several page sizes",
    "tests/frontends/test_onnx_activations.py": "ONNX activations and unary math end to end",
    "tests/frontends/test_onnx_light_ops.py": "ONNX LRN, Dropout, Sum and Mean end to end",
    "tests/frontends/test_onnx_quant.py": "ONNX DequantizeLinear and MatMulInteger end to end",
    "tests/frontends/test_onnx_attention.py": "ONNX Attention end to end",
    "tests/frontends/test_onnx_norms.py": "ONNX RMS, group, instance, MVN and L1 norms and "
                                          "RotaryEmbedding end to end",
    "tests/frontends/test_onnx_reduce.py": "ONNX Reduce* end to end",
    "tests/frontends/test_onnx_signal.py": "ONNX DFT, STFT, windows and MelWeightMatrix end "
                                           "to end",
    "tests/frontends/test_onnx_sequence.py": "ONNX SwiGLU, TensorScatter and "
                                             "CausalConvWithState end to end",
    "tests/frontends/test_onnx_index.py": "ONNX gathers, scatters, Trilu, Tile, OneHot and "
                                          "depth/space moves end to end",
    "tests/frontends/test_onnx_casts.py": "ONNX CastLike, Size, Range, Mod, Pow, EyeLike, integer, "
                                          "bitwise ops, Swish and Shrink end to end",
    "tests/frontends/test_onnx_light_models.py": "ONNX's nine light models end to end (their "
                                                 "151-411 MB weights through staging)",
    "tests/frontends/test_onnx_recurrent.py": "ONNX LSTM and GRU, and ddddocr, end to end",
    "tests/runtime/test_sync_validation.py": "barriers around staging copies, checked by the "
                                             "layer's synchronization validation",
    "tests/frontends/test_onnx_bert_block.py": "an ONNX BERT block end to end",
    "tests/frontends/test_onnx_int8_minilm.py": "the int8 MiniLM export end to end",
    "tests/frontends/test_onnx_lifetime.py": "an ONNX model's device memory given back",
    "tests/distributed/test_data_parallel.py": "one batch split across contexts",
}

HARDENED: dict[str, str] = {
    "tests/test_soak_short.py": "the soak, scaled down",
    "tests/test_bad_inputs.py": "the bad-input corpus",
    "tests/framework/models/test_hostile_model_files.py": "hostile model directories",
    "tests/framework/models/test_gguf_hostile.py": "hostile GGUF files",
    "tests/frontends/test_hostile_files.py": "hostile ONNX files",
    "tests/runtime/test_exhaustion.py": "memory, descriptor pools and queues run out",
    "tests/runtime/test_threads.py": "concurrent recording and submission",
    "tests/framework/execute/test_threads_compiled.py": "one compiled function called from "
                                                        "threads, buckets evicted",
    "tests/vk/test_faults.py": "every Vulkan call failing, lost devices",
    "tests/runtime/test_suballoc.py::TestRangeAllocatorMachine": "sub-allocator fuzz",
    "tests/framework/graph/test_fusion_dags.py": "fusion fuzz over random DAGs",
    "tests/framework/graph/test_graph_memory.py::test_random_dags_never_overlap_live_values":
        "memory-planner fuzz",
    "tests/framework/graph/test_graph_passes.py::test_random_dags_every_pass_keeps_the_values":
        "pass fuzz",
    "tests/framework/graph/test_compile_e2e.py::test_random_elementwise_functions":
        "compile fuzz",
    "tests/framework/execute/test_lower_windows.py::"
    "test_random_window_graphs_compile_and_match_the_reference": "lowering fuzz",
    "tests/framework/test_matmul.py::test_shape_search": "GEMM shape fuzz",
    "tests/serve/test_bad_requests.py": "the server's bad-request corpus",
    "tests/serve/test_fuzz.py": "request-body fuzz against the server",
    "tests/serve/test_faults.py": "device faults under the server's batcher",
    "tests/serve/test_generation.py::test_bad_request": "the generation routes' bad-request "
    "corpus",
    "tests/serve/test_generation.py::test_a_device_fault_fails_its_request_only":
        "a fault in a decode step under the server",
    "tests/fuzz/test_fuzz_model_files.py": "model-file fuzz: ONNX, safetensors, config.json",
}

# The tests that import torch. torch in a process makes every later gc.collect() scan its
# ~280k objects (0.2-0.7 s a call here), which the bad-input corpus and the lifetime checks
# call per case: these run in a lane of their own (make test-torch), and a run whose -m
# excludes torch does not even collect their modules (tests/conftest.py).
TORCH: dict[str, str] = {
    "tests/frontends/test_torch_compile.py": "torch.compile and torch.export on vkumd",
    "tests/frontends/test_torch_fallback.py": "what falls back to torch, and why",
    "tests/frontends/test_torch_reduce.py": "the aten reductions over any axes",
    "tests/frontends/test_torch_activations.py": "the elementwise tail through torch.compile",
    "tests/frontends/test_torch_resample.py": "resize, pad, grid sampling and transposed "
                                              "convolution from torch",
    "tests/frontends/test_torch_cnn.py": "convolution, pooling and batch norm from torch",
    "tests/frontends/test_torch_index.py": "gather, scatters, triu and tril from torch",
    "tests/frontends/test_torch_rows.py": "log_softmax, cumsum and cumprod from torch",
    "tests/frontends/test_torch_tensor_ops.py":
        "slices, joins, fills, comparisons, top-k and the unary math from torch",
    "tests/framework/test_input_conversion.py::test_torch_bridge_refuses_ids_past_int32":
        "the torch bridge's input rule",
    "tests/bench/test_gpu_scripts.py::test_compare_refuses_a_torch_peer_it_cannot_have":
        "bench/gpu's torch peer",
    "tests/bench/test_gpu_scripts.py::test_the_torch_llama_peer_matches_the_float64_reference":
        "bench/gpu's PyTorch Llama peer",
}

TIERS: dict[str, dict[str, str]] = {"smoke": SMOKE, "fast": FAST, "transfers": TRANSFERS,
                                    "hardened": HARDENED, "torch": TORCH}

MARKERS = {
    "smoke": "a kernel family's central reference check (test-fast; device-only lane)",
    "fast": "device-free or second-long unit tests (make test-fast)",
    "transfers": "host<->device transfer paths (the device-only lane runs these)",
    "hardened": "soak, fuzz, exhaustion, faults, bad inputs (make test-hardened)",
    "torch": "imports torch; runs in a lane of its own (make test-torch)",
}


def markers_for(nodeid: str) -> list[str]:
    """The tier markers of the test ``nodeid`` (``path::[Class::]name[params]``): those of
    its module, its class and its function."""
    parts = nodeid.split("[", 1)[0].split("::")
    names = {"::".join(parts[:i]) for i in range(1, len(parts) + 1)}
    return [marker for marker, table in TIERS.items() if names & table.keys()]
