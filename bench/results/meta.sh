started="2026-12-02 03:43:31 UTC"
elapsed="833"
commit="fa3f785"
COUNT="5" BENCHTIME="2s" BENCH="."
