#!/bin/bash
# Measurement sweeps of real training steps of zoo models on one GPU (docs/calibration.md).
#   bash scripts/profile_sweep.sh plan     OUT_DIR [BUDGET_S]   the jobs and groups `dltsched profile --plan` picks for
#                                                              this GPU within BUDGET_S, then measured
#   bash scripts/profile_sweep.sh isolated OUT_DIR [BUDGET_S]   ~50 (model, batch) jobs alone
#   bash scripts/profile_sweep.sh groups   OUT_DIR [BUDGET_S]   16 jobs alone, then 44 pairs and 12 triples co-located
# Runs `dltsched profile` (DLTSCHED env var: the command to run it, default `dltsched`); needs a CUDA GPU. Each job
# is timed for at least 30 steps, then until its median step is within +-2% at 95% (at most 30 s).
# Then, on any machine: dltsched calibrate OUT_DIR --out CAL.json
set -euo pipefail
mode=$1; out=$2; budget=${3:-480}
cli=${DLTSCHED:-dltsched}
common=(--steps 30 --warmup 5 --timeout 180 --budget "$budget" --out "$out" --json)
if [ "$mode" = plan ]; then
  # the plan for this GPU (worked out on the CPU), then measured with this run's flags
  name=$(python3 -c "import torch; print(torch.cuda.get_device_name())")
  mapfile -t args < <($cli profile --plan --budget "$budget" --gpu "$name" --json | python3 -c "import json, sys
plan = json.load(sys.stdin)
print(*[f for j in plan['jobs'] for f in ('--job', j['job'])], *[f for g in plan['groups'] for f in ('--groups', g)],
      sep='\n')")
  $cli profile "${args[@]}" "${common[@]}"
elif [ "$mode" = isolated ]; then
  jobs="resnet18:32 resnet18:64 resnet18:128 resnet18:256 resnet50:32 resnet50:64 resnet50:128 resnet101:32
        resnet101:64 vgg16:64 vgg16:128 vgg19:64 mobilenet_v2:64 mobilenet_v2:256 mobilenet_v3:64 shufflenet_v2:128
        efficientnet_b0:128 vit_b16:32 vit_b16:64 transformer:32 transformer:64 transformer:128 lstm_lm:20
        lstm_lm:80 bert_base:16 bert_base:32 bert_large:8 gpt2:4 gpt2:8 gpt2_large:2 gpt3_xl:1 opt_1.3b:1
        gpt3_2.7b:1 neumf:1024 neumf:8192 recoder:2048 dcgan:64 cyclegan:1 yolov3:8 yolov3:16 deepspeech2:20
        pointnet:32 a2c:16 a3c:4 dqn:128 ppo:64 td3:100"
  args=(); for j in $jobs; do args+=(--job "$j"); done
  $cli profile "${args[@]}" "${common[@]}"
elif [ "$mode" = groups ]; then
  # 44 pairs (with repeats) and 12 triples of 16 jobs, drawn with random.Random(24); pairs and triples
  # interleaved so that a spent budget still leaves some of each.
  pairs="lstm_lm:20+yolov3:8 gpt2:8+pointnet:32 transformer:64+transformer:64 resnet18:128+lstm_lm:20
        a3c:4+deepspeech2:20 vit_b16:32+a3c:4 neumf:8192+cyclegan:1 mobilenet_v2:256+neumf:8192
        resnet18:128+resnet18:128 yolov3:8+yolov3:8 mobilenet_v2:256+transformer:64 mobilenet_v2:256+cyclegan:1
        resnet50:64+yolov3:8 mobilenet_v2:256+lstm_lm:20 transformer:64+neumf:8192 dcgan:64+deepspeech2:20
        gpt2:8+cyclegan:1 resnet18:128+bert_base:32 resnet50:64+neumf:8192 resnet50:64+pointnet:32
        vgg16:128+deepspeech2:20 cyclegan:1+a3c:4"
  triples="vgg16:128+mobilenet_v2:256+pointnet:32 vgg16:128+a3c:4+yolov3:8 bert_base:32+gpt2:8+yolov3:8
        resnet50:64+bert_base:32+dcgan:64 vit_b16:32+bert_base:32+deepspeech2:20 bert_base:32+neumf:8192+yolov3:8"
  pairs2="gpt2:8+gpt2:8 resnet50:64+vgg16:128 lstm_lm:20+pointnet:32 a3c:4+yolov3:8 mobilenet_v2:256+dcgan:64
        resnet50:64+bert_base:32 gpt2:8+yolov3:8 vgg16:128+gpt2:8 pointnet:32+a3c:4 lstm_lm:20+bert_base:32
        vit_b16:32+pointnet:32 gpt2:8+dcgan:64 mobilenet_v2:256+mobilenet_v2:256 dcgan:64+dcgan:64
        dcgan:64+pointnet:32 resnet18:128+vgg16:128 neumf:8192+a3c:4 resnet18:128+deepspeech2:20
        neumf:8192+deepspeech2:20 bert_base:32+bert_base:32 pointnet:32+deepspeech2:20 bert_base:32+neumf:8192"
  triples2="resnet18:128+lstm_lm:20+deepspeech2:20 vgg16:128+dcgan:64+pointnet:32 transformer:64+lstm_lm:20+pointnet:32
        vgg16:128+mobilenet_v2:256+gpt2:8 vgg16:128+transformer:64+a3c:4 lstm_lm:20+gpt2:8+pointnet:32"
  args=(); for g in $pairs $triples $pairs2 $triples2; do args+=(--groups "$g"); done
  $cli profile "${args[@]}" "${common[@]}"
else
  echo "usage: $0 plan|isolated|groups OUT_DIR [BUDGET_S]" >&2; exit 2
fi
