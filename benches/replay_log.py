"""A generated nginx `combined` log for the replay benchmark (docs/PERFORMANCE.md, CLI replay):
2,000,000 lines, one hour, ~187k clients, to /tmp/big.log."""
import random, time
random.seed(7); t0 = 1796180400; N = 2_000_000
paths = ["/wiki/Article_%d", "/app.css?v=3", "/load.js?v=7", "/w/Special:WhatLinksHere/Page_%d",
         "/index.php?title=Special%%3AWhatLinksHere%%2FPage_%d&limit=500", "/healthz"]
ua = '"Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0.0.0 Safari/537.36"'
with open("/tmp/big.log", "w") as f:
    for i in range(N):
        tm = time.gmtime(t0 + i * 3600 // N)
        ts = time.strftime("%d/Dec/%Y:%H:%M:%S +0000", tm); p = random.choice(paths)
        if "%d" in p: p = p % random.randrange(100000)
        ip = "36.%d.%d.%d" % (110 + random.randrange(3), random.randrange(250), random.randrange(1, 250))
        f.write('%s - - [%s] "GET %s HTTP/1.1" 200 %d "-" %s\n' % (ip, ts, p, random.randrange(100, 50000), ua))
