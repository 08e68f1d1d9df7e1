/* kv_split.c: a KV byte budget split into full-pool and window-pool blocks. */
#include "kv/kv_split.h"
#include "base/status.h"

#include <math.h>

#define MAX_BLOCKS ((int64_t)1 << 27)

static int64_t clamp_blocks(int64_t n) { return n > MAX_BLOCKS ? MAX_BLOCKS : n; }

cinfer_status cf_kv_split(const cf_kv_split_in *in, cf_kv_split_out *out, cinfer_error *err) {
    const int64_t F = in->full_bytes, W = in->win_bytes, S = in->max_seqs;
    out->n_full = out->n_win = out->bytes = 0;
    if (!W) {   /* one pool */
        int64_t n = F > 0 ? in->kv_bytes / F : 0;
        if (!in->kv_bytes) {
            n = (int64_t)in->ctx_blocks * S;
            if (in->mem_cap > 0 && F > 0 && n > in->mem_cap / F) n = in->mem_cap / F;
        }
        n = clamp_blocks(n);
        if (n < 1)
            return cf_fail(err, CINFER_E_INVALID_ARGUMENT, "%lld bytes of KV memory hold no block of %d tokens (%lld bytes)",
                           (long long)in->kv_bytes, in->block_size, (long long)F);
        out->n_full = n;
        out->bytes = n * F;
        return CINFER_OK;
    }
    const int64_t extra = in->win_blocks_step - in->win_blocks_decode;   /* one sequence's largest step, once */
    int64_t budget = in->kv_bytes;
    if (!budget) {
        const int64_t nf = (int64_t)in->ctx_blocks * S, nw = S * in->win_blocks_decode + extra;
        const double want = (double)nf * (double)F + (double)nw * (double)W;
        if (in->mem_cap <= 0 || want <= (double)in->mem_cap) {
            out->n_full = clamp_blocks(nf);
            out->n_win = clamp_blocks(nw);
            out->bytes = out->n_full * F + out->n_win * W;
            return CINFER_OK;
        }
        budget = in->mem_cap;
    }
    int64_t nf, nw;
    if (F > 0) {
        /* sequences' worth of both pools: nseq * (ctx * F + decode * W) + extra * W = budget */
        const double per_seq = (double)in->ctx_blocks * (double)F + (double)in->win_blocks_decode * (double)W;
        const double nseq = ((double)budget - (double)extra * (double)W) / per_seq;
        nw = nseq > 0 ? (int64_t)ceil(nseq * in->win_blocks_decode) + extra : 0;
        if (nw < in->win_blocks_step) nw = in->win_blocks_step;
        nf = budget - nw * W > 0 ? (budget - nw * W) / F : 0;
    } else {
        nf = (int64_t)in->ctx_blocks * S;   /* token chains only: room for every sequence's context */
        nw = budget / W;
    }
    nf = clamp_blocks(nf);
    nw = clamp_blocks(nw);
    if (nf < 1 || nw < in->win_blocks_step) {
        const double least = (double)in->win_blocks_step * (double)W + (double)F;
        return cf_fail(err, CINFER_E_INVALID_ARGUMENT,
                       "%lld bytes of KV memory are too few: the sliding-window layers need %d blocks of %d tokens (%lld bytes each) for "
                       "one sequence's window and step, and the full layers a block (%lld bytes); give at least %.0f bytes",
                       (long long)budget, in->win_blocks_step, in->block_size, (long long)W, (long long)F, least);
    }
    out->n_full = nf;
    out->n_win = nw;
    out->bytes = nf * F + nw * W;
    return CINFER_OK;
}
