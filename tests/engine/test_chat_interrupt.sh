#!/usr/bin/env bash
# test_chat_interrupt.sh: Ctrl-C in `cinfer chat` on a terminal (a tmux pane): during a reply it stops
# the reply and the chat goes on; at the prompt it quits with status 0. Skipped (77) without tmux.
# usage: test_chat_interrupt.sh CINFER_BIN MODEL_DIR
set -u
bin=$1
model=$2
command -v tmux >/dev/null || { echo "tmux not found: skipped"; exit 77; }
tmp=$(mktemp -d)
sess="cinfer-chat-test-$$"
trap 'tmux kill-session -t "$sess" 2>/dev/null; rm -rf "$tmp"' EXIT
fail() { echo "FAIL $*"; echo "--- pane:"; tmux capture-pane -p -t "$sess" 2>/dev/null; echo "--- stderr:"; cat "$tmp/err"; exit 1; }
# waits up to $1 seconds for command $2... to succeed
wait_for() { local t=$1; shift; for _ in $(seq $((t * 10))); do "$@" && return 0; sleep 0.1; done; return 1; }

tmux new-session -d -s "$sess" -x 160 -y 40 \
  "'$bin' chat --model '$model' --max-tokens 100000 --ignore-eos --temperature 0.8 --seed 1 2>'$tmp/err'; echo \$? >'$tmp/status'; sleep 30"
wait_for 60 sh -c "[ \$(tmux capture-pane -p -t '$sess' | grep -c '^>') -ge 1 ]" || fail "no prompt"
tmux send-keys -t "$sess" "Tell me a long story" Enter
# wait until the reply has started streaming, then interrupt it
wait_for 60 sh -c "[ \$(tmux capture-pane -p -t '$sess' | grep -v '^>' | grep -c .) -ge 1 ]" || fail "no reply text"
tmux send-keys -t "$sess" C-c
wait_for 20 grep -q '^\[reply stopped\]' "$tmp/err" || fail "Ctrl-C did not stop the reply"
wait_for 20 sh -c "[ \$(tmux capture-pane -p -t '$sess' | grep -c '^>') -ge 2 ]" || fail "no prompt after the stopped reply"
[ -e "$tmp/status" ] && fail "chat exited on Ctrl-C during a reply"
# at the prompt, Ctrl-C quits
tmux send-keys -t "$sess" C-c
wait_for 20 test -e "$tmp/status" || fail "Ctrl-C at the prompt did not quit"
[ "$(cat "$tmp/status")" = 0 ] || fail "exit status $(cat "$tmp/status")"
echo "Ctrl-C stopped the reply and then quit at the prompt"
