# H200: the target set part $1 (s17.sh A or B); any other GPU: nothing (stop 49 has no experiment left for it)
set -u
name=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$name"
case "$name" in *H200*) bash .gpu/s17.sh "${1:-A}" ;; *) echo "not an H200: nothing to run" ;; esac
