package weir

/*
#include <stdlib.h>
#include <sys/mman.h>
#include "weir.h"

// A zone's region: anonymous memory, page-aligned and zero until a key lands in a page.
static void *wgo_region_alloc(size_t n) {
	void *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	return p == MAP_FAILED ? NULL : p;
}

static void wgo_region_free(void *p, size_t n) { munmap(p, n); }
*/
import "C"

import (
	"errors"
	"fmt"
	"unsafe"

	"github.com/caddyserver/caddy/v2"
)

// Zone algorithms (weir.h, weir_zone_spec.algorithm).
const (
	algGCRA        = int(C.WEIR_ALGORITHM_GCRA)
	algSliding     = int(C.WEIR_ALGORITHM_SLIDING)
	algConcurrency = int(C.WEIR_ALGORITHM_CONCURRENCY)
	algSlidingLog  = int(C.WEIR_ALGORITHM_SLIDING_LOG)
)

// zoneParams are an inline zone as the engine declares it (weir_zone_spec and
// weir_limit_spec); equal params share state across reloads.
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
	queue     uint64
	timeoutNS uint64
	status    int
	logLevel  int    // weir_limit_spec.log_level
	key       string // one key part: "ip", "global" or "var:<engName>"
	v4, v6    int    // prefixes of the ip part, or those a var key's addresses are masked to (-1: not given)
	cluster   string // distributed: the zone's cluster settings (policy text), else ""
}

// regions keeps each inline zone's table across engines: a config whose zones changed gets a
// new engine, attached to the tables of the zones that did not (same name, same params), so
// that those keep their state. Each engine holds one reference to each of its regions.
var regions = caddy.NewUsagePool()

// zoneRegion is a pooled region holding one inline zone's table.
type zoneRegion struct {
	p unsafe.Pointer
	n C.size_t
}

// Destruct implements caddy.Destructor (when no engine uses the region any more).
func (r *zoneRegion) Destruct() error {
	C.wgo_region_free(r.p, r.n)
	return nil
}

// releaseRegions gives back an engine's references to its regions (once it is freed).
func releaseRegions(keys map[string]string) {
	for _, k := range keys {
		_, _ = regions.Delete(k)
	}
}

// newZonesEngine declares each zone as a host-limits zone with one limit, in order (limit i is
// zones[i]), and makes their engine over the zones' pooled regions, whose keys it returns by
// the engine's zone name (releaseRegions once the engine is freed).
func newZonesEngine(zones []*inlineZone) (eng *engine, keys map[string]string, err error) {
	pol, err := buildZones(zones)
	if err != nil {
		return nil, nil, err
	}
	defer C.weir_policy_free(pol)
	defer func() {
		if err != nil {
			releaseRegions(keys)
		}
	}()
	byName := map[string]*inlineZone{}
	for _, z := range zones {
		byName[z.params.engName] = z
	}
	n := int(C.weir_policy_zone_count(pol))
	regs := make([]C.weir_region, n)
	keys = make(map[string]string, n)
	for i := 0; i < n; i++ { // the policy's zones, in its order (by name)
		var info C.weir_zone_info
		if rc := C.weir_policy_zone(pol, C.size_t(i), &info); rc != C.WEIR_OK {
			return nil, keys, takeError(nil, rc)
		}
		name := C.GoStringN((*C.char)(unsafe.Pointer(info.name)), C.int(info.name_len))
		key := fmt.Sprintf("region|%q=%+v", byName[name].name, byName[name].params)
		v, _, err := regions.LoadOrNew(key, func() (caddy.Destructor, error) {
			p := C.wgo_region_alloc(info.bytes)
			if p == nil {
				return nil, fmt.Errorf("zone %s: cannot map %d bytes", name, uint64(info.bytes))
			}
			return &zoneRegion{p: p, n: info.bytes}, nil
		})
		if err != nil {
			return nil, keys, err
		}
		keys[name] = key
		r := v.(*zoneRegion)
		regs[i] = C.weir_region{ptr: r.p, len: r.n}
	}
	var e *C.weir_engine
	var cerr *C.weir_error
	// The regions are C memory (cgo lets C keep no Go pointer), zero where no table is yet.
	if rc := C.weir_engine_attach_shared(pol, unsafe.SliceData(regs), C.size_t(n), nil, nil, 0,
		C.WEIR_ATTACH_ZEROED, &e, &cerr); rc != C.WEIR_OK {
		return nil, keys, takeError(cerr, rc)
	}
	return describe(e), keys, nil
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
