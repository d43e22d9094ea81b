package weir

/*
#include <stdlib.h>
#include <sys/mman.h>
#include "weir.h"

// A region: anonymous memory, page-aligned and zero until a key lands in a page.
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
	"strings"
	"unsafe"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"
)

// Regions keep zones' state across config reloads, as nginx keeps its shared memory zones.
// Every engine (a policy file's, a weir block's inline zones', a distributed block's) is made
// over pooled regions (weir_engine_attach_shared), one per zone, one per cluster zone's shared
// side and, for a policy, one for its counters. A region is pooled under its owner (the policy
// file, or the inline zones, which are shared by name across handlers as caddy-ratelimit's
// are) and its identity: for a zone its name, layout (weir_policy_zone_layout: algorithm,
// window, log events, scope, size) and schema; for the counters the limits' fingerprint.
//
// Invariants:
//   - a region is attached only by engines whose zone has its exact identity, so attaching
//     keeps every state (keys, bans, a GCRA rate change rescaled by the engine) and is never
//     refused for its layout; a changed layout gets a new, empty region;
//   - each engine holds one reference to each of its regions, given back after the engine is
//     freed; the new config's engine takes its references before the old config's cleanup
//     gives back the old engine's, so a region both use lives on;
//   - a region nobody holds is unmapped: a zone removed and added back later starts empty.
//   - a policy whose limits changed gets new counters, which list the bans the old ones
//     listed (weir_engine_carry_bans), as nginx's counters zone does.
var regions = caddy.NewUsagePool()

// errRegionGone: no engine holds the region any more.
var errRegionGone = errors.New("region gone")

// region is a pooled region.
type region struct {
	p unsafe.Pointer
	n C.size_t
	// owner and what name the zone (or the counters); identity is the rest of its key.
	owner, what, identity string
}

// Destruct implements caddy.Destructor (when no engine holds the region any more).
func (r *region) Destruct() error {
	C.wgo_region_free(r.p, r.n)
	return nil
}

// engineRegions are the pool keys of the regions one engine holds.
type engineRegions struct {
	zones    map[string]string // by the engine's zone name
	clusters map[string]string // a cluster zone's shared side, by zone name
	counters string            // "" when the counters live in the engine
}

// release gives back the engine's references (once the engine is freed).
func (r *engineRegions) release() {
	for _, k := range r.zones {
		_, _ = regions.Delete(k)
	}
	for _, k := range r.clusters {
		_, _ = regions.Delete(k)
	}
	if r.counters != "" {
		_, _ = regions.Delete(r.counters)
	}
}

// holds reports whether the engine holds region key.
func (r *engineRegions) holds(key string) bool {
	if r == nil {
		return false
	}
	for _, k := range r.zones {
		if k == key {
			return true
		}
	}
	for _, k := range r.clusters {
		if k == key {
			return true
		}
	}
	return r.counters == key
}

// regionKey is the pool key of the region owner/what/identity.
func regionKey(owner, what, identity string) string {
	return fmt.Sprintf("%q|%q|%s", owner, what, identity)
}

// takeRegion adds a reference to the region owner/what/identity, creating it (n zero bytes) when no
// engine holds one. fresh, when not nil, is called with the identity of a region of the same
// owner and what that a running config holds under another identity (the layout changed).
func takeRegion(owner, what, identity string, n C.size_t, fresh func(was string)) (string, *region, error) {
	key := regionKey(owner, what, identity)
	if _, held := regions.References(key); !held && fresh != nil {
		was := ""
		regions.Range(func(_, v any) bool {
			if r, ok := v.(*region); ok && r.owner == owner && r.what == what {
				was = r.identity
				return false
			}
			return true
		})
		if was != "" {
			fresh(was)
		}
	}
	v, _, err := regions.LoadOrNew(key, func() (caddy.Destructor, error) {
		p := C.wgo_region_alloc(n)
		if p == nil {
			return nil, fmt.Errorf("%s: cannot map %d bytes", what, uint64(n))
		}
		return &region{p: p, n: n, owner: owner, what: what, identity: identity}, nil
	})
	if err != nil {
		return "", nil, err
	}
	return key, v.(*region), nil
}

// attachPooled makes pol's engine over pooled regions of owner (see regions): every zone and
// cluster side, and the counters when counters is true (else they live in the engine, and
// start from zero with each new engine). logger (may be nil) gets a notice for each zone that
// starts with fresh state because its layout changed, and for counters that start from zero
// because the limits changed, as nginx's reload logs them. On error no reference is kept.
func attachPooled(pol *C.weir_policy, owner string, counters bool, logger *zap.Logger) (eng *engine, held *engineRegions, err error) {
	held = &engineRegions{zones: map[string]string{}, clusters: map[string]string{}}
	defer func() {
		if err != nil {
			held.release()
			held = nil
		}
	}()
	n := int(C.weir_policy_zone_count(pol))
	regs := make([]C.weir_region, n)
	cluster := make([]C.weir_region, n)
	anyCluster := false
	for i := 0; i < n; i++ {
		var info C.weir_zone_info
		if rc := C.weir_policy_zone(pol, C.size_t(i), &info); rc != C.WEIR_OK {
			return nil, held, takeError(nil, rc)
		}
		name := C.GoStringN((*C.char)(unsafe.Pointer(info.name)), C.int(info.name_len))
		layout := zoneLayout(pol, i)
		identity := fmt.Sprintf("%s schema=%016x", layout, uint64(info.schema))
		fresh := func(was string) {
			if logger != nil {
				logger.Info(fmt.Sprintf("weir zone %q starts with fresh state: its layout changed from %q to %q",
					name, layoutOf(was), layout), zap.String("source", owner))
			}
		}
		key, r, err := takeRegion(owner, "zone "+name, identity, info.bytes, fresh)
		if err != nil {
			return nil, held, err
		}
		held.zones[name] = key
		regs[i] = C.weir_region{ptr: r.p, len: r.n}
		if info.cluster_bytes == 0 {
			continue
		}
		anyCluster = true
		key, r, err = takeRegion(owner, "cluster zone "+name, identity, info.cluster_bytes, nil)
		if err != nil {
			return nil, held, err
		}
		held.clusters[name] = key
		cluster[i] = C.weir_region{ptr: r.p, len: r.n}
	}
	var cnt *C.weir_region
	// old: the counters region of the running config when the limits changed, held (so mapped)
	// until its bans are listed again in the new one (weir_engine_carry_bans).
	var old *region
	defer func() {
		if old != nil {
			_, _ = regions.Delete(regionKey(old.owner, old.what, old.identity))
		}
	}()
	if counters {
		bytes := C.weir_policy_counters_bytes(pol)
		identity := fmt.Sprintf("limits=%016x size=%d", uint64(C.weir_policy_counters_fingerprint(pol)), uint64(bytes))
		fresh := func(was string) {
			if logger != nil {
				logger.Info("weir counters start from zero: the policy's limits changed", zap.String("source", owner))
			}
			// A reference only if some engine still holds it (else it is gone: nothing to carry).
			key := regionKey(owner, "counters", was)
			if v, _, err := regions.LoadOrNew(key, func() (caddy.Destructor, error) { return nil, errRegionGone }); err == nil {
				old = v.(*region)
			}
		}
		key, r, err := takeRegion(owner, "counters", identity, bytes, fresh)
		if err != nil {
			return nil, held, err
		}
		held.counters = key
		cnt = &C.weir_region{ptr: r.p, len: r.n}
	}
	var clusterPtr *C.weir_region
	if anyCluster {
		clusterPtr = unsafe.SliceData(cluster)
	}
	var e *C.weir_engine
	var cerr *C.weir_error
	// The regions are C memory (cgo lets C keep no Go pointer), zero where nothing is yet;
	// the slices of weir_region are Go memory holding C pointers only, read during the call.
	if rc := C.weir_engine_attach_shared(pol, unsafe.SliceData(regs), C.size_t(n), clusterPtr, cnt, 0,
		C.WEIR_ATTACH_ZEROED, &e, &cerr); rc != C.WEIR_OK {
		return nil, held, takeError(cerr, rc)
	}
	if old != nil {
		// The bans listed in the old counters stay listed while they are enforced.
		_ = C.weir_engine_carry_bans(e, &C.weir_region{ptr: old.p, len: old.n})
	}
	return describe(e), held, nil
}

// zoneLayout is zone i's layout text (weir_policy_zone_layout), e.g. "sliding window=1m size=65536".
func zoneLayout(pol *C.weir_policy, i int) string {
	n := C.weir_policy_zone_layout(pol, C.size_t(i), nil, 0)
	if n == 0 {
		return ""
	}
	buf := make([]byte, n)
	C.weir_policy_zone_layout(pol, C.size_t(i), (*C.uint8_t)(unsafe.Pointer(&buf[0])), n)
	return string(buf)
}

// layoutOf is the layout part of a zone region's identity.
func layoutOf(identity string) string {
	layout, _, _ := strings.Cut(identity, " schema=")
	return layout
}

// parsePolicy parses policy text (name appears in error messages as name:line:col); the
// caller frees the policy.
func parsePolicy(text []byte, name string) (*C.weir_policy, error) {
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	var pol *C.weir_policy
	var cerr *C.weir_error
	if rc := C.weir_policy_parse(bptr(text), C.size_t(len(text)), cname, &pol, &cerr); rc != C.WEIR_OK {
		return nil, takeError(cerr, rc)
	}
	return pol, nil
}

// newPolicyEngine parses policy text (name appears in error messages as name:line:col) and
// makes its engine over pooled regions of owner (attachPooled).
func newPolicyEngine(text []byte, name, owner string, counters bool, logger *zap.Logger) (*engine, *engineRegions, error) {
	pol, err := parsePolicy(text, name)
	if err != nil {
		return nil, nil, err
	}
	defer C.weir_policy_free(pol)
	return attachPooled(pol, owner, counters, logger)
}
