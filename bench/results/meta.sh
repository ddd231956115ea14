started="2026-12-02 18:11:45 UTC"
elapsed="1602"
commit="fe943d5"
COUNT="5" BENCHTIME="4s" BENCH="."
