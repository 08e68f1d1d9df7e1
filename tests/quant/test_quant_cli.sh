#!/usr/bin/env bash
# test_quant_cli.sh: the quantization verbs from the command line. cinfer quantize writes a q4 folder that
# run and info use; bench --random-weights --quant q8 benchmarks quantized random weights; bad values are
# usage errors (exit 2), and so are quantizing a folder into itself and quantizing a quantized folder again.
# usage: test_quant_cli.sh CINFER_BIN MODEL_DIR TMP_DIR
set -u
bin=$1
model=$2
tmp=$3
fails=0
rm -rf "$tmp"; mkdir -p "$tmp"
out=$("$bin" quantize --model "$model" --out "$tmp/q4" --bits 4 --group-size 64 2>&1); st=$?
if [ "$st" != 0 ] || ! printf '%s' "$out" | grep -q "57 matrices quantized to 4 bits (group 64), 0 left"; then
  echo "FAIL quantize: exit $st, output: $out"; fails=$((fails+1))
fi
for f in config.json model.safetensors tokenizer.json tokenizer_config.json generation_config.json; do
  [ -f "$tmp/q4/$f" ] || { echo "FAIL quantize: no $f"; fails=$((fails+1)); }
done
python3 -c 'import json,sys; c=json.load(open(sys.argv[1])); q=c["quantization"]; assert q=={"group_size":64,"bits":4,"mode":"affine"} and c["quantization_config"]==q' \
  "$tmp/q4/config.json" || { echo "FAIL quantize: config.json quantization block"; fails=$((fails+1)); }
out=$("$bin" info --model "$tmp/q4" 2>&1); st=$?
if [ "$st" != 0 ] || ! printf '%s' "$out" | grep -q "dtypes:.*Q4/g64"; then echo "FAIL info: exit $st, output: $out"; fails=$((fails+1)); fi
out=$("$bin" run --model "$tmp/q4" --prompt-ids 968,262,2446,534 --max-tokens 6 --threads 1 2>&1); st=$?
if [ "$st" != 0 ] || [ "$(printf '%s' "$out" | wc -w)" != 6 ]; then echo "FAIL run q4: exit $st, output: $out"; fails=$((fails+1)); fi
out=$("$bin" quantize --model "$model" --out "$tmp/keep" --bits 8 --keep lm_head 2>&1); st=$?
if [ "$st" != 0 ] || ! printf '%s' "$out" | grep -q "56 matrices quantized to 8 bits (group 64), 1 left"; then
  echo "FAIL quantize --keep lm_head (tied: the embedding): exit $st, output: $out"; fails=$((fails+1))
fi
out=$("$bin" bench --random-weights "$model/config.json" --quant q8 --prompt 4 --gen 4 --reps 1 --threads 1 --json 2>&1); st=$?
if [ "$st" != 0 ] || ! printf '%s' "$out" | grep -q '"weight_dtype":"BF16+Q8/g64 (random)"'; then
  echo "FAIL bench --quant q8: exit $st, output: $out"; fails=$((fails+1))
fi
usage() {
  "$bin" "$@" >/dev/null 2>&1; st=$?
  [ "$st" = 2 ] || { echo "FAIL '$*': exit $st (want 2)"; fails=$((fails+1)); }
}
usage quantize --model "$model" --out "$tmp/x" --bits 7
usage quantize --model "$model" --out "$tmp/x" --group-size 16
usage quantize --model "$model"
usage quantize --out "$tmp/x"
usage bench --random-weights "$model/config.json" --quant q5
usage bench --model "$model" --quant q4
"$bin" quantize --model "$model" --out "$model" >/dev/null 2>&1; st=$?
[ "$st" = 2 ] || { echo "FAIL quantize into the input folder: exit $st (want 2)"; fails=$((fails+1)); }
err=$("$bin" quantize --model "$tmp/q4" --out "$tmp/again" 2>&1); st=$?
if [ "$st" != 2 ] || ! printf '%s' "$err" | grep -q "quantized already"; then echo "FAIL quantize twice: exit $st, $err"; fails=$((fails+1)); fi
echo "$fails failures"
[ "$fails" = 0 ]
