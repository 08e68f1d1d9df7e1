/* fuzz_config.c: libFuzzer harness for config.json text -> cf_hparams (cf_hparams_parse). An accepted
 * config must satisfy what the decoder and the KV cache are sized from; a rejected one leaves nothing
 * allocated. Seeds: tests/fixtures/config_seeds. */
#include "model/arch.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static void require(int cond) {
    if (!cond) __builtin_trap();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *text = malloc(size + 1);
    if (!text) return 0;
    memcpy(text, data, size);
    text[size] = 0;
    cf_hparams hp;
    cinfer_error err = {0};
    if (cf_hparams_parse(text, "config.json", &hp, &err) != CINFER_OK) {
        require(!hp.layers && err.message[0]);
        free(text);
        return 0;
    }
    require(hp.layers && hp.n_layers >= 1 && hp.n_layers <= CF_MAX_LAYERS);
    require(hp.dim >= 1 && hp.vocab >= 1 && hp.vocab <= CF_MAX_VOCAB && hp.max_ctx >= 1 && hp.max_ctx <= CF_MAX_CTX);
    require(hp.norm_eps > 0 && isfinite(hp.norm_eps) && isfinite(hp.embed_scale));
    require(isfinite(hp.attn_softcap) && isfinite(hp.final_softcap));
    for (int r = 0; r < hp.n_rope; r++)
        for (int i = 0; i < hp.rope[r].rot_dim / 2; i++) require(isfinite(hp.rope[r].inv_freq[i]) && hp.rope[r].inv_freq[i] >= 0);
    for (int l = 0; l < hp.n_layers; l++) {
        const cf_layer_hp *L = &hp.layers[l];
        require(L->n_kv_heads >= 1 && L->n_heads % L->n_kv_heads == 0 && L->head_dim >= 2 && L->head_dim <= CF_MAX_HEAD_DIM);
        require(L->window >= 0 && L->window <= hp.max_ctx && L->ffn_dim >= 1 && L->kv_source >= 0 && L->kv_source <= l);
        require(L->rope_set >= 0 && L->rope_set < hp.n_rope && hp.rope[L->rope_set].rot_dim == L->head_dim);
        require(isfinite(L->attn_scale) && L->attn_scale > 0);
    }
    require(cf_hparams_n_params(&hp) > 0 && cf_hparams_active_params(&hp) > 0);
    require(cf_hparams_kv_bytes_per_token(&hp, 4) > 0 && cf_hparams_kv_read_bytes(&hp, hp.max_ctx, 4) > 0);
    cf_hparams_free(&hp);
    free(text);
    return 0;
}
