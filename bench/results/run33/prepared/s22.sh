# H200: the target set part $1 (s17.sh A or B); any other GPU: the attention experiment (s21)
set -u
name=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$name"
case "$name" in *H200*) bash .gpu/s17.sh "${1:-A}" ;; *) bash .gpu/s21.sh ;; esac
