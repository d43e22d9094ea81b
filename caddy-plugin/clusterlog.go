package weir

/*
#include "weir.h"
*/
import "C"

import (
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/caddyserver/caddy/v2"
)

var clusterLogOnce sync.Once

// startClusterLog routes the messages of cluster syncers (policy zones with
// scope = "cluster", which sync from threads of their own) to Caddy's log: the library
// queues them and one goroutine per process moves them to the logger every 200 ms. Call it
// before the first engine is built (the library writes to standard error until then).
func startClusterLog() {
	clusterLogOnce.Do(func() {
		C.weir_cluster_log_queue()
		logger := caddy.Log().Named("http.handlers.weir.cluster")
		go func() {
			buf := make([]byte, 1024)
			for range time.Tick(200 * time.Millisecond) {
				for {
					n := C.weir_cluster_log_pop((*C.uint8_t)(unsafe.Pointer(&buf[0])), C.size_t(len(buf)))
					if n == 0 {
						break
					}
					msg := string(buf[:n])
					if strings.Contains(msg, "sync resumed") {
						logger.Info(msg)
					} else {
						logger.Error(msg)
					}
				}
			}
		}()
	})
}
