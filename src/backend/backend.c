/* backend.c: choosing and creating a backend. */
#include "backend/backend.h"
#include "base/status.h"

#include <string.h>

cf_backend_params cf_backend_default_params(void) {
    cf_backend_params p = {.device = CF_DEVICE_CPU, .n_threads = 0, .gpu_index = 0, .pool_bytes = 0};
    return p;
}

cinfer_status cf_device_parse(const char *s, cf_device *out, cinfer_error *err) {
    if (!strcmp(s, "cpu")) { *out = CF_DEVICE_CPU; return CINFER_OK; }
    if (!strcmp(s, "cuda") || !strcmp(s, "gpu")) { *out = CF_DEVICE_CUDA; return CINFER_OK; }
    return cf_fail(err, CINFER_E_INVALID_ARGUMENT, "unknown device '%s' (expected cpu or cuda)", s);
}

cinfer_status cf_backend_create(const cf_backend_params *p, cf_backend **out, cinfer_error *err) {
    *out = NULL;
    if (p->device == CF_DEVICE_CUDA) return cf_cuda_backend_create(p, out, err);
    return cf_cpu_backend_create(p, out, err);
}

void cf_backend_destroy(cf_backend *be) {
    if (be) be->ops->destroy(be);
}

#ifndef CINFER_HAVE_CUDA
cinfer_status cf_cuda_backend_create(const cf_backend_params *p, cf_backend **out, cinfer_error *err) {
    *out = NULL;
    return cf_fail(err, CINFER_E_UNSUPPORTED, "this cinfer was built without the CUDA backend (configure with -DCINFER_CUDA=ON on a machine with nvcc)");
}
#endif
