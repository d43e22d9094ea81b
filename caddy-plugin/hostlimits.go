package weir

/*
#include <stdlib.h>
#include "weir.h"
*/
import "C"

import (
	"errors"
	"unsafe"

	"go.uber.org/zap"
)

// Zone algorithms (weir.h, weir_zone_spec.algorithm).
const (
	algGCRA        = int(C.WEIR_ALGORITHM_GCRA)
	algSliding     = int(C.WEIR_ALGORITHM_SLIDING)
	algConcurrency = int(C.WEIR_ALGORITHM_CONCURRENCY)
	algSlidingLog  = int(C.WEIR_ALGORITHM_SLIDING_LOG)
)

// zoneParams are an inline zone as the engine declares it (weir_zone_spec and
// weir_limit_spec); equal params share an engine across reloads, equal layouts a table.
type zoneParams struct {
	engName   string // the zone's and its limit's name in the engine
	algorithm int
	bytes     uint64
	events    uint64 // sliding, sliding log
	windowNS  uint64 // sliding, sliding log
	count     uint64 // gcra: count per periodNS
	periodNS  uint64
	burst     uint64
	delay     int64 // gcra: -1 nodelay
	max       uint64
	auto      bool      // concurrency: max learned from latency, within bounds
	bounds    [2]uint64 // with auto: min, max
	queue     uint64
	timeoutNS uint64
	status    int
	logLevel  int    // weir_limit_spec.log_level
	key       string // one key part: "ip", "global" or "var:<engName>"
	v4, v6    int    // prefixes of the ip part, or those a var key's addresses are masked to (-1: not given)
	cluster   string // distributed: the zone's cluster settings (policy text), else ""
}

// newZonesEngine declares each zone as a host-limits zone with one limit, in order (limit i is
// zones[i]), and makes their engine over pooled regions (attachPooled: a zone whose layout is
// unchanged keeps its table across reloads; the counters live in the engine).
func newZonesEngine(zones []*inlineZone, logger *zap.Logger) (*engine, *engineRegions, error) {
	build := buildZones
	if learned(zones) {
		// Learned limits are policy syntax only: the same zones and limits as policy text.
		build = func(zones []*inlineZone) (*C.weir_policy, error) {
			return parsePolicy([]byte(zonesPolicy(zones)), "inline zones")
		}
	}
	pol, err := build(zones)
	if err != nil {
		return nil, nil, err
	}
	defer C.weir_policy_free(pol)
	return attachPooled(pol, "inline zones", false, logger)
}

// learned reports whether a zone's limit is learned (max auto).
func learned(zones []*inlineZone) bool {
	for _, z := range zones {
		if z.params.auto {
			return true
		}
	}
	return false
}

// buildZones declares each zone as a host-limits zone with one limit (limit i is zones[i])
// and compiles them.
func buildZones(zones []*inlineZone) (*C.weir_policy, error) {
	b := C.weir_host_limits_new()
	defer C.weir_host_limits_free(b)
	for _, z := range zones {
		p := &z.params
		zs := C.weir_zone_spec{algorithm: C.int(p.algorithm), size: C.uint64_t(p.bytes),
			rate:   C.weir_rate{count: C.uint64_t(p.count), period_ns: C.uint64_t(p.periodNS)},
			events: C.uint64_t(p.events), window_ns: C.uint64_t(p.windowNS), max: C.uint64_t(p.max)}
		if rc := C.weir_host_limits_zone(b, sptr(p.engName), C.size_t(len(p.engName)), &zs); rc != C.WEIR_OK {
			return nil, takeError(nil, rc)
		}
		// The spec may hold no Go pointers (cgo's rule): its texts are copied to C memory.
		name, key := C.CString(p.engName), C.CString(p.key)
		ls := C.weir_limit_spec{
			zone: (*C.uint8_t)(unsafe.Pointer(name)), zone_len: C.size_t(len(p.engName)),
			name: (*C.uint8_t)(unsafe.Pointer(name)), name_len: C.size_t(len(p.engName)),
			key: (*C.uint8_t)(unsafe.Pointer(key)), key_len: C.size_t(len(p.key)),
			ipv4_prefix: C.int(p.v4), ipv6_prefix: C.int(p.v6), burst: C.uint64_t(p.burst),
			delay: C.int64_t(p.delay), status: C.uint16_t(p.status), log_level: C.int(p.logLevel),
			max: C.uint64_t(p.max), queue: C.uint64_t(p.queue), timeout_ns: C.uint64_t(p.timeoutNS),
		}
		var idx C.uint16_t
		rc := C.weir_host_limits_limit(b, &ls, &idx)
		C.free(unsafe.Pointer(name))
		C.free(unsafe.Pointer(key))
		if rc != C.WEIR_OK {
			return nil, takeError(nil, rc)
		}
	}
	var pol *C.weir_policy
	msg := make([]C.char, 4096)
	if rc := C.weir_host_limits_build(b, &pol, &msg[0], C.size_t(len(msg))); rc != C.WEIR_OK {
		if msg[0] == 0 {
			return nil, takeError(nil, rc)
		}
		return nil, errors.New(C.GoString(&msg[0]))
	}
	return pol, nil
}
