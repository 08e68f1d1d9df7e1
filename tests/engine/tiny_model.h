/* tiny_model.h: writes a tiny random-weight Llama model folder for the engine tests: config.json,
 * model.safetensors in float32, and a byte-level tokenizer without merges (ids 0-2 are <|endoftext|>,
 * <|im_start|>, <|im_end|>; byte b is id TINY_BYTE + b) with a ChatML chat template. EOS is <|im_end|>. */
#ifndef CF_TESTS_TINY_MODEL_H
#define CF_TESTS_TINY_MODEL_H

enum { TINY_BYTE = 3, TINY_VOCAB = TINY_BYTE + 256, TINY_CTX = 128, TINY_EOS = 2 };

enum { TINY_NO_TOKENIZER = 1, TINY_NO_TEMPLATE = 2 };

/* Creates dir (if needed) and writes the model into it, without the parts flags name. Returns 0 on
 * success. */
int tiny_model_write(const char *dir, int flags);

#endif
