started="2026-12-02 20:37:28 UTC"
elapsed="1322"
commit="5d982c1"
COUNT="5" BENCHTIME="4s" BENCH="."
