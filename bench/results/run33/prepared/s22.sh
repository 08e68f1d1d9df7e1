# H200: the target set (s19: stages A and B); any other GPU: the attention experiment (s21)
set -u
name=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$name"
case "$name" in *H200*) bash .gpu/s19.sh ;; *) bash .gpu/s21.sh ;; esac
