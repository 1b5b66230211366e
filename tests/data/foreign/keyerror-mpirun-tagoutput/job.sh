#!/bin/bash
# launched from ip-10-1-2-3 with the OpenMPI 4.1.5 that ships in the image
set -euo pipefail
export NCCL_DEBUG=INFO NCCL_SOCKET_IFNAME=ens5 NCCL_IB_DISABLE=1
export MASTER_ADDR=10.1.2.3 MASTER_PORT=29611
mpirun --tag-output --allow-run-as-root -np 6 -H ip-10-1-2-3:4,ip-10-1-2-7:2 \
    -x NCCL_DEBUG -x NCCL_SOCKET_IFNAME -x NCCL_IB_DISABLE -x MASTER_ADDR -x MASTER_PORT -x PATH \
    --bind-to none --map-by slot \
    python -u train_mlm.py --config configs/roberta_l_mlm.yaml --data /fsx/corpora/web_v3 2>&1 | tee mpirun.out
