started="2026-11-30 08:30:56 UTC"
elapsed="857"
commit="1045641"
COUNT="5" BENCHTIME="4s" BENCH="."
