export LD_LIBRARY_PATH=$PWD/build-gpu/bundle:$LD_LIBRARY_PATH
B=$PWD/build-gpu
echo "== empty graph natively"; build-probe/empty_graph 2>&1 | head -12
$B/bin/flyt-server --listen unix:/tmp/p.sock > $OUT/probe-server.log 2>&1 & S=$!
sleep 2
echo "== empty graph through Flyt"; FLYT_TRACE=1 $B/bin/flyt-run --server unix:/tmp/p.sock -- build-probe/empty_graph 2>&1 | head -20
echo "== compile_modes through Flyt (trace)"
FLYT_TRACE=1 timeout 150 $B/bin/flyt-run --server unix:/tmp/p.sock -- python3 tests/gpu/pytorch_check.py --stage compile_modes > $OUT/cm.out 2> $OUT/cm.err
grep -v "^  File\|^    " $OUT/cm.err | grep -i "trace\|error" | head -30; tail -12 $OUT/cm.out
kill $S
echo "== elastic"
FLYT_RECONNECT_TIMEOUT_S=60 bash scripts/gpu-run.sh build-gpu --quick --only elastic > $OUT/elastic-run.txt 2>&1
grep -E "identical|FAIL|refused" $OUT/elastic.txt | grep -v "state phases" | cut -c1-260
