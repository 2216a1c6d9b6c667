#!/usr/bin/env bash
# (Record: ran on the tree of 2026-12-06 05:27 with draft passes bracketed as graph steps, models/forward_step.h
# draft_step of commit a0e6f4e; that code was dropped after this measurement, so on later trees "on" drafts eagerly.)
# Device call (about 3-4 minutes) for issue 13: draft passes as graph steps (models/forward_step.h draft_step).
# The bench's draft row runs one draft step as the scheduler does; with --cuda-graphs off every step is eager
# (the draft pass as before the change), with it on the draft pass is a graph step. Three rounds in
# alternation, process by process, tg16 d4096 C = 1 with the verify2 / draft rows (the whole model on an
# H200, 24 layers on an H100: LAYERS=0|N overrides).
# Build and carry: BUILD_DIR=build-dev scripts/device-bundle.sh bloomery, tar -c .devcarry/bundle | xz -T2 -6 >
#   .devcarry-all/b.txz; lean-tree.sh on. device run, carry [".devcarry-all"], command: bash scripts/gpu/draft-graph.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/gpu/bundle-env.sh
set_model_cut
for r in 1 2 3; do
  for g in off on; do
    timeout 80 $B/bin/bloomery bench --backend cuda --synthetic qwen4_exp "${cut[@]}" -p 0 -n 16 -d 4096 -c 1 \
      -r 1 --spec-rows 2 --cuda-graphs $g --json-out $out/draft-$g-$r.json > $out/draft-$g-$r.txt 2>&1
    grep -E "^\| (tg|verify|draft)" $out/draft-$g-$r.txt | sed "s/^/graphs $g round $r: /"
  done
done | tee $out/draft-rounds.txt
pack
find $out -mindepth 1 -not -name all.tgz -delete
