#!/usr/bin/env bash
# How the default models are trained: the command run on the GPU machine (one NVIDIA H200) from the
# repository root, with .cache/train/ (made here by fetch_data.sh) carried along; arguments go on to
# train.py (the last run: --draft models/cinfer-tiny-draft --no-smoke). It writes
# $OUT/train-log.txt and the output folder as $OUT/models.tar.part-* (15 MiB pieces); unpack with
#   cat models.tar.part-* | tar -x -C models/
set -uo pipefail
out="${OUT:?set OUT to the folder that receives the log and the tar pieces}"
work=/tmp/cinfer-train
rm -rf "$work"
mkdir -p "$work"
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
python3 tools/train/train.py --data .cache/train --out "$work/models" "$@" 2>&1 | tee "$out/train-log.txt"
rc=${PIPESTATUS[0]}
if [ -d "$work/models" ]; then
  tar -C "$work/models" --exclude=_smoke --exclude=_jobs -cf - . | split -b 15m - "$out/models.tar.part-"
fi
ls -l "$out"
exit "$rc"
