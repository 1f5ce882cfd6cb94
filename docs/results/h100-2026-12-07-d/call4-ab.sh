# Call 4 as run (from the repository root as `bash .kb/ab.sh 270`, .kb and .whl carried, after
# `git archive 547bebe src scripts benchmarks | tar -x -C .kb/old`): the same-machine A/B of the estimate change on
# three slow pairs, A = 547bebe (.kb/old), B = this tree (6df3561); A, B, A, B in turn, cut by the limit after A, B
R=$PWD; S=$SECONDS; C=$OUT/console4.log
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl > /dev/null 2>&1
mkdir -p .kb/old/.kb && ln -sfn $R/.kb/kernelbench .kb/old/.kb/kernelbench && ln -sfn $R/.kb/peers-kernelbench .kb/old/.kb/peers-kernelbench
P=level2/2_ConvTranspose2d_BiasAdd_Clamp_Scaling_Clamp_Divide,level3/17_SqueezeNetFireModule,level1/7_Matmul_with_small_K_dimension_
for side in A B A B; do
  if [ $side = A ]; then d=$R/.kb/old; else d=$R; fi
  (cd $d && PYTHONPATH=$d/src:/tmp/site PYTHONUNBUFFERED=1 KBV_CACHE_DIR=/tmp/cache-$side TRITON_CACHE_DIR=/tmp/triton-$side timeout $(( ${1:-290} - (SECONDS - S) - 5 )) python3 scripts/gpu_check.py --stages vskb --vskb-pairs $P --out /tmp/ab-$side-$SECONDS >> $C 2>&1)
  echo "== $side at $((SECONDS-S)) s" >> $C
  tar czf $OUT/ab.tgz -C /tmp $(cd /tmp && ls -d ab-*) 2>/dev/null
done
