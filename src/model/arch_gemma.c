/* arch_gemma.c: Gemma 2, 3 and 4 (text) config.json -> cf_hparams. */
#include "model/arch.h"
#include "base/status.h"

#include <cjson/cJSON.h>

cinfer_status cf_gemma_hparams(const cJSON *cfg, const char *arch_name, cf_hparams *hp, const char *path, cinfer_error *err) {
    return cf_fail(err, CINFER_E_UNSUPPORTED, "%s: architecture '%s' is not supported yet", path, arch_name);
}
