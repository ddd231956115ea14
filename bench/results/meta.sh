started="2026-12-02 04:49:51 UTC"
elapsed="863"
commit="600b0f8"
COUNT="5" BENCHTIME="2s" BENCH="."
