started="2026-12-02 08:29:29 UTC"
elapsed="1379"
commit="8b16620"
COUNT="5" BENCHTIME="4s" BENCH="."
