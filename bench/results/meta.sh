started="2026-12-02 04:03:38 UTC"
elapsed="865"
commit="13b65cf"
COUNT="5" BENCHTIME="2s" BENCH="."
