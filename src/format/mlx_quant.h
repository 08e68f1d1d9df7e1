/* mlx_quant.h: MLX affine quantization as mlx_lm writes it. Owns the parsed `quantization` block of
 * config.json (also accepted as `quantization_config`): the default group size and bits, and per-module
 * overrides (a module path mapped to its own {group_size, bits}, or to false: not quantized); and finding a
 * quantized module's `<module>.weight` (U32 packed), `.scales` and `.biases` in a safetensors set with every
 * shape checked. Other modes (mxfp4, nvfp4, mxfp8) are refused with CINFER_E_UNSUPPORTED. */
#ifndef CF_FORMAT_MLX_QUANT_H
#define CF_FORMAT_MLX_QUANT_H

#include "cinfer.h"
#include "base/qweight.h"
#include "format/safetensors.h"

typedef struct cf_mlxq_override {
    char *path;        /* module path as in the file, e.g. "model.layers.0.mlp.down_proj" */
    int quantized;     /* 0: the config maps it to false */
    int bits, group;
} cf_mlxq_override;

typedef struct cf_mlxq_config {
    int present;       /* config.json has a quantization block */
    int bits, group;   /* the defaults */
    cf_mlxq_override *ov;
    int n_ov;
} cf_mlxq_config;

/* Reads the quantization block of the config.json at path (none: present = 0). Bad values are
 * CINFER_E_FORMAT, a mode other than "affine" or bits / group size outside MLX's sets CINFER_E_UNSUPPORTED. */
cinfer_status cf_mlxq_config_load(const char *config_path, cf_mlxq_config *out, cinfer_error *err);
/* The same from the text of a config.json (name for messages). */
cinfer_status cf_mlxq_config_parse(const char *json, const char *name, cf_mlxq_config *out, cinfer_error *err);
void cf_mlxq_config_free(cf_mlxq_config *c);

/* The weight of module (tensor names module + ".weight", ".scales", ".biases") with the logical shape
 * [rows, cols]. Sets *quantized 0 and does nothing else when the module is not quantized (no .scales and a
 * weight that is not U32); else fills *out (borrowing the set's mapped data) after checking: weight U32
 * [rows, cols * bits / 32], scales and biases of one float dtype, both [rows, cols / group], the config's
 * bits and group for the module (CINFER_E_FORMAT naming the tensor otherwise, also for a .scales without a
 * quantization block in config.json or for a module the config marks false). out->q is 4-byte aligned (the
 * safetensors reader refuses misaligned elements). */
cinfer_status cf_mlxq_find(const cf_st_set *set, const cf_mlxq_config *c, const char *module, int64_t rows, int64_t cols,
                           cf_qweight *out, int *quantized, cinfer_error *err);

/* Writes the model folder in_dir to out_dir quantized as mlx_lm.convert would (cinfer quantize): every 2-D
 * "<module>.weight" of F32/F16/BF16 whose input dimension is a multiple of group (MLX's default predicate
 * for Linear and Embedding layers; norms and other vectors never) becomes <module>.weight (U32),
 * .scales and .biases (the weight's dtype), quantized by cf_qweight_quantize; MoE expert stacks (3-D) and
 * the modules named in keep stay as they are. keep: n_keep module names, each matching a module path or its
 * last components ("lm_head", "embed_tokens", "mlp.down_proj"); with tied embeddings "lm_head" keeps
 * embed_tokens too. Writes out_dir/model.safetensors, config.json (the input's with "quantization" and
 * "quantization_config": {group_size, bits, mode "affine"}) and copies the tokenizer and generation files.
 * out_dir is created if missing; it must not be in_dir. *n_quantized, *n_kept (may be NULL) count the
 * matrices quantized and left as they were. The packed tensors come first in the file, so each starts on
 * a 4-byte boundary. */
cinfer_status cf_mlxq_quantize_dir(const char *in_dir, const char *out_dir, int bits, int group, const char *const *keep, int n_keep,
                                   int *n_quantized, int *n_kept, cinfer_error *err);

#endif
