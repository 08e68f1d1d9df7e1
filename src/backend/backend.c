/* backend.c: choosing and creating a backend. */
#include "backend/backend.h"
#include "base/status.h"

#include <stdlib.h>
#include <string.h>

cf_tuning cf_tuning_defaults(void) {
    return (cf_tuning){.fused_ops = 1, .decode_graphs = 1, .device_sampling = 1, .cuda_direct_alloc = 0, .cuda_f32_act = 0, .pdl = 1,
                       .gemv_unroll = 0, .gemv_max_rows = 1, .gemv_tc_max_rows = 16, .gemv_warps = 8, .gemv_block_warps = 4,
                       .attn_bc = 32, .attn_hpb = 2, .attn_group = 1, .attn_group_splits = 64, .attn_cluster = 1, .paged_mma_group = 0,
                       .paged_sm_blocks = 3, .attn_paged_d512 = 1, .qmma_max_rows = 128, .qgemv_max_rows = 8, .qgemv_warps = 24, .qgemv_tc = 1,
                       .qgemv_tc_splits = 8};
}

static void env_int(const char *name, int *v) {
    const char *s = getenv(name);
    if (s && *s) *v = atoi(s);
}

cf_tuning cf_tuning_from_env(void) {
    cf_tuning t = cf_tuning_defaults();
    env_int("CINFER_FUSED_OPS", &t.fused_ops);
    env_int("CINFER_DECODE_GRAPHS", &t.decode_graphs);
    env_int("CINFER_DEVICE_SAMPLING", &t.device_sampling);
    env_int("CINFER_CUDA_DIRECT_ALLOC", &t.cuda_direct_alloc);
    env_int("CINFER_CUDA_F32_ACT", &t.cuda_f32_act);
    env_int("CINFER_CUDA_PDL", &t.pdl);
    env_int("CINFER_GEMV_UNROLL", &t.gemv_unroll);
    env_int("CINFER_GEMV_MAX_ROWS", &t.gemv_max_rows);
    env_int("CINFER_GEMV_TC_MAX_ROWS", &t.gemv_tc_max_rows);
    env_int("CINFER_GEMV_WARPS", &t.gemv_warps);
    env_int("CINFER_GEMV_BLOCK_WARPS", &t.gemv_block_warps);
    env_int("CINFER_ATTN_BC", &t.attn_bc);
    env_int("CINFER_ATTN_HPB", &t.attn_hpb);
    env_int("CINFER_ATTN_GROUP", &t.attn_group);
    env_int("CINFER_ATTN_GROUP_SPLITS", &t.attn_group_splits);
    env_int("CINFER_ATTN_CLUSTER", &t.attn_cluster);
    env_int("CINFER_PAGED_MMA_GROUP", &t.paged_mma_group);
    env_int("CINFER_PAGED_SM_BLOCKS", &t.paged_sm_blocks);
    env_int("CINFER_ATTN_PAGED_D512", &t.attn_paged_d512);
    env_int("CINFER_QMMA_MAX_ROWS", &t.qmma_max_rows);
    env_int("CINFER_QGEMV_MAX_ROWS", &t.qgemv_max_rows);
    env_int("CINFER_QGEMV_WARPS", &t.qgemv_warps);
    env_int("CINFER_QGEMV_TC", &t.qgemv_tc);
    env_int("CINFER_QGEMV_TC_SPLITS", &t.qgemv_tc_splits);
    return t;
}

cf_backend_params cf_backend_default_params(void) {
    cf_backend_params p = {.device = CF_DEVICE_CPU, .n_threads = 0, .gpu_index = 0, .pool_bytes = 0, .tuning = cf_tuning_from_env()};
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
