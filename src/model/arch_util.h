/* arch_util.h: helpers shared by the config.json parsers (arch.c for the Llama family, arch_gemma.c). */
#ifndef CF_MODEL_ARCH_UTIL_H
#define CF_MODEL_ARCH_UTIL_H

#include "model/arch.h"

#include <limits.h>

struct cJSON;

/* o[key] is present and not null */
int cf_cfg_has(const struct cJSON *o, const char *key);
/* o[key] if it is a boolean, else dflt */
int cf_cfg_flag(const struct cJSON *o, const char *key, int dflt);

#define CF_CFG_REQUIRED INT_MIN   /* a dflt of cf_cfg_int: absent or null is an error */
/* *out = o[key], an integer in [lo, hi]; absent or null: dflt. Anything else (not a number, a fraction,
 * out of range) is a CINFER_E_FORMAT error that names the key, the value and the range. */
cinfer_status cf_cfg_int(const struct cJSON *o, const char *key, int dflt, int lo, int hi, int *out, const char *path,
                         cinfer_error *err);
/* *out = o[key] as a finite float32 > 0; absent or null: dflt. Else a CINFER_E_FORMAT error naming key. */
cinfer_status cf_cfg_positive(const struct cJSON *o, const char *key, double dflt, float *out, const char *path,
                              cinfer_error *err);
/* head_dim values rotary embeddings support: even and at most CF_MAX_HEAD_DIM (key names the field). */
cinfer_status cf_check_head_dim(int head_dim, const char *key, const char *path, cinfer_error *err);

/* One rotary table for heads of rot_dim dimensions rotated in the rotate-half layout, from theta and
 * a transformers rope parameter object (rope_type / type, factor, ...; NULL = default). */
cinfer_status cf_rope_init(cf_rope_set *r, const struct cJSON *params, float theta, int rot_dim, const char *where,
                           cinfer_error *err);

/* Gemma 2, 3 and 4 (arch_gemma.c); name is the config's architectures[0] or model_type. */
cinfer_status cf_gemma_hparams(const struct cJSON *cfg, const char *name, cf_hparams *hp, const char *path, cinfer_error *err);
/* Whether name is one cf_gemma_hparams reads. */
int cf_gemma_known(const char *name);

#endif
