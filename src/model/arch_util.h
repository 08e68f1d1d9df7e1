/* arch_util.h: helpers shared by the config.json parsers (arch.c for the Llama family, arch_gemma.c). */
#ifndef CF_MODEL_ARCH_UTIL_H
#define CF_MODEL_ARCH_UTIL_H

#include "model/arch.h"

struct cJSON;

/* o[key] if it is a number, else dflt */
double cf_cfg_num(const struct cJSON *o, const char *key, double dflt);
/* o[key] is present and not null */
int cf_cfg_has(const struct cJSON *o, const char *key);
/* o[key] if it is a boolean, else dflt */
int cf_cfg_flag(const struct cJSON *o, const char *key, int dflt);

/* One rotary table for heads of rot_dim dimensions rotated in the rotate-half layout, from theta and
 * a transformers rope parameter object (rope_type / type, factor, ...; NULL = default). */
cinfer_status cf_rope_init(cf_rope_set *r, const struct cJSON *params, float theta, int rot_dim, const char *where,
                           cinfer_error *err);

/* Gemma 2, 3 and 4 (arch_gemma.c); name is the config's architectures[0] or model_type. */
cinfer_status cf_gemma_hparams(const struct cJSON *cfg, const char *name, cf_hparams *hp, const char *path, cinfer_error *err);
/* Whether name is one cf_gemma_hparams reads. */
int cf_gemma_known(const char *name);

#endif
