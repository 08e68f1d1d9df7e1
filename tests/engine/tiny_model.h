/* tiny_model.h: writes a tiny random-weight Llama model folder for the engine tests (config.json and
 * model.safetensors in float32; vocab TINY_VOCAB, context TINY_CTX, EOS id TINY_EOS). */
#ifndef CF_TESTS_TINY_MODEL_H
#define CF_TESTS_TINY_MODEL_H

enum { TINY_VOCAB = 300, TINY_CTX = 128, TINY_EOS = 1 };

/* Creates dir (if needed) and writes the model into it. Returns 0 on success. */
int tiny_model_write(const char *dir);

#endif
