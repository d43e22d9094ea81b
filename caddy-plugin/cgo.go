package weir

/*
#cgo CFLAGS: -I${SRCDIR}/../include
#cgo LDFLAGS: ${SRCDIR}/../target/caddy/libweir_caddy.a -lm -ldl -lpthread -lrt -lutil -lgcc_s
#include <stdlib.h>
#include <string.h>
#include "weir.h"

// The library's hash (CGO_CFLAGS, see the Makefile) compiled into this package's object, so
// that a changed libweir_caddy.a changes the package's output and Go relinks the binary (the
// build cache hashes neither the archive named in LDFLAGS nor an unused -D).
#ifdef WEIR_LIB_SHA
#define WGO_STR2(x) #x
#define WGO_STR(x) WGO_STR2(x)
__attribute__((used)) static const char wgo_lib_sha[] = WGO_STR(WEIR_LIB_SHA);
#endif

// Request headers packed by Go into one buffer: for each header line,
// [u32 name_len][lowercase name][u32 value_len][value], native byte order.
// The lookup runs in C so that one evaluation is exactly one cgo call.
// The engine reads the lines of one name in order (nth 0, 1, 2, ...): a lookup of nth right
// after nth - 1 of the same name resumes after that line (at `next`), so n repeated lines
// cost O(n), not O(n^2). `last_nth` is SIZE_MAX while no line was found.
typedef struct {
	const uint8_t *buf; size_t len;
	size_t last_nth, last_name, last_name_len, next;
} wgo_headers;

static int wgo_header(void *ctx, const uint8_t *lname, size_t lname_len, size_t nth,
                      const uint8_t **value, size_t *value_len) {
	wgo_headers *h = (wgo_headers *) ctx;
	size_t off = 0, seen = 0;
	if (nth > 0 && h->last_nth == nth - 1 && h->last_name_len == lname_len &&
	    memcmp(h->buf + h->last_name, lname, lname_len) == 0) {
		off = h->next;
		seen = nth;
	}
	while (off + 4 <= h->len) {
		uint32_t nl, vl;
		memcpy(&nl, h->buf + off, 4); off += 4;
		if (off + nl + 4 > h->len) return 0;
		size_t name = off; off += nl;
		memcpy(&vl, h->buf + off, 4); off += 4;
		if (off + vl > h->len) return 0;
		const uint8_t *val = h->buf + off; off += vl;
		if (nl == lname_len && memcmp(h->buf + name, lname, nl) == 0) {
			if (seen == nth) {
				h->last_nth = nth; h->last_name = name; h->last_name_len = nl; h->next = off;
				*value = val; *value_len = vl;
				return 1;
			}
			seen++;
		}
	}
	return 0;
}

static weir_request wgo_request(const uint8_t *m, size_t ml, const uint8_t *t, size_t tl,
                                const uint8_t *p, size_t pl, wgo_headers *h) {
	weir_request r = {0};
	r.method = m; r.method_len = ml; r.target = t; r.target_len = tl;
	r.peer = p; r.peer_len = pl;
	r.header = h->len ? wgo_header : NULL; r.header_ctx = h;
	return r;
}

static int wgo_evaluate(const weir_engine *e, const uint8_t *m, size_t ml, const uint8_t *t, size_t tl,
                        const uint8_t *p, size_t pl, const uint8_t *hb, size_t hl, uint64_t now,
                        weir_verdict *out, uint8_t *buf, size_t cap) {
	wgo_headers h = { hb, hl, SIZE_MAX, 0, 0, 0 };
	weir_request r = wgo_request(m, ml, t, tl, p, pl, &h);
	return weir_engine_evaluate(e, &r, now, out, buf, cap);
}

static int wgo_evaluate_queued(const weir_engine *e, const uint8_t *m, size_t ml, const uint8_t *t,
                               size_t tl, const uint8_t *p, size_t pl, const uint8_t *hb, size_t hl,
                               uint64_t now, weir_verdict *v, uint8_t *buf, size_t cap) {
	wgo_headers h = { hb, hl, SIZE_MAX, 0, 0, 0 };
	weir_request r = wgo_request(m, ml, t, tl, p, pl, &h);
	return weir_engine_evaluate_queued(e, &r, now, v, buf, cap);
}
*/
import "C"

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/http"
	"net/textproto"
	"strings"
	"sync"
	"time"
	"unsafe"
)

// Verdict actions (weir.h).
const (
	actPass   = int(C.WEIR_PASS)
	actDelay  = int(C.WEIR_DELAY)
	actReject = int(C.WEIR_REJECT)
	actQueue  = int(C.WEIR_QUEUE)
)

const (
	errBadTarget = int(C.WEIR_ERR_BAD_TARGET)
	headerCap    = 512
)

// The tables' clock is CLOCK_MONOTONIC in ns. Read it once through cgo and advance it with
// Go's own monotonic clock, so a request costs no extra cgo call for the time.
var (
	clockBase  = uint64(C.weir_now_ns())
	clockStart = time.Now()
)

func nowNS() uint64 { return clockBase + uint64(time.Since(clockStart)) }

func takeError(e *C.weir_error, rc C.int) error {
	if e == nil {
		return fmt.Errorf("weir error %d", int(rc))
	}
	msg := C.GoString(C.weir_error_message(e))
	C.weir_error_free(e)
	return errors.New(msg)
}

func bptr(b []byte) *C.uint8_t {
	if len(b) == 0 {
		return nil
	}
	return (*C.uint8_t)(unsafe.Pointer(&b[0]))
}

func sptr(s string) *C.uint8_t {
	if len(s) == 0 {
		return nil
	}
	return (*C.uint8_t)(unsafe.Pointer(unsafe.StringData(s)))
}

// engine owns a weir_engine (and the limit and header names, read once).
type engine struct {
	p      *C.weir_engine
	limits []string
	// headers the policy reads; the engine asks for no other, so only these are copied.
	headers []policyHeader
}

// policyHeader is a header the policy reads: its key in Go's http.Header and weir's name.
type policyHeader struct {
	key, name string
}

// newEngine parses policy text (name appears in error messages as name:line:col).
func newEngine(text []byte, name string) (*engine, error) {
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	var pol *C.weir_policy
	var cerr *C.weir_error
	if rc := C.weir_policy_parse(bptr(text), C.size_t(len(text)), cname, &pol, &cerr); rc != C.WEIR_OK {
		return nil, takeError(cerr, rc)
	}
	defer C.weir_policy_free(pol)
	var e *C.weir_engine
	if rc := C.weir_engine_new(pol, &e, &cerr); rc != C.WEIR_OK {
		return nil, takeError(cerr, rc)
	}
	eng := &engine{p: e}
	n := int(C.weir_engine_limit_count(e))
	for i := 0; i < n; i++ {
		var p *C.uint8_t
		var l C.size_t
		if C.weir_engine_limit_name(e, C.size_t(i), &p, &l) == C.WEIR_OK {
			eng.limits = append(eng.limits, C.GoStringN((*C.char)(unsafe.Pointer(p)), C.int(l)))
		} else {
			eng.limits = append(eng.limits, fmt.Sprintf("limit%d", i))
		}
	}
	for i := 0; ; i++ {
		var p *C.uint8_t
		var l C.size_t
		if C.weir_engine_header_name(e, C.size_t(i), &p, &l) != C.WEIR_OK {
			break
		}
		name := C.GoStringN((*C.char)(unsafe.Pointer(p)), C.int(l))
		if !isTestHeader(name) { // the test harness's own headers are never the request's
			eng.headers = append(eng.headers, policyHeader{textproto.CanonicalMIMEHeaderKey(name), name})
		}
	}
	return eng, nil
}

// checkPolicy parses policy text without creating tables.
func checkPolicy(text []byte, name string) error {
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	var pol *C.weir_policy
	var cerr *C.weir_error
	if rc := C.weir_policy_parse(bptr(text), C.size_t(len(text)), cname, &pol, &cerr); rc != C.WEIR_OK {
		return takeError(cerr, rc)
	}
	C.weir_policy_free(pol)
	return nil
}

// parseRate parses a zone's rate with the policy's parser ("10r/s", "30r/m", "100r/h",
// "1000r/d"): count requests per periodNS, or the words a policy file gives for the value.
func parseRate(s string) (count, periodNS uint64, err error) {
	var r C.weir_rate
	msg := parseMessage(s)
	if rc := C.weir_parse_rate(sptr(s), C.size_t(len(s)), &r, &msg[0], C.size_t(len(msg))); rc != C.WEIR_OK {
		return 0, 0, parseError(msg, rc)
	}
	return uint64(r.count), uint64(r.period_ns), nil
}

// parseSize parses a size with the policy's parser: bytes, or a number with k, m or g.
func parseSize(s string) (uint64, error) {
	var n C.uint64_t
	msg := parseMessage(s)
	if rc := C.weir_parse_size(sptr(s), C.size_t(len(s)), &n, &msg[0], C.size_t(len(msg))); rc != C.WEIR_OK {
		return 0, parseError(msg, rc)
	}
	return uint64(n), nil
}

// parseMessage is a buffer for a weir_parse_* message about s (which the message quotes,
// escaped: at most 6 bytes per byte of s).
func parseMessage(s string) []C.char { return make([]C.char, 256+6*len(s)) }

func parseError(msg []C.char, rc C.int) error {
	if msg[0] == 0 {
		return fmt.Errorf("weir error %d", int(rc))
	}
	return errors.New(C.GoString(&msg[0]))
}

func (e *engine) free() {
	if e.p != nil {
		C.weir_engine_free(e.p)
		e.p = nil
	}
}

func (e *engine) limitName(i int) string {
	if i >= 0 && i < len(e.limits) {
		return e.limits[i]
	}
	return ""
}

// reqView is what the engine needs of one request.
type reqView struct {
	method, target, peer string
	headers              []byte // packed, see wgo_header
}

// verdict is a weir_verdict plus the response header lines the engine wrote.
type verdict struct {
	v    C.weir_verdict
	rc   int
	hbuf [headerCap]byte
}

func (v *verdict) action() int        { return int(v.v.action) }
func (v *verdict) status() int        { return int(v.v.status) }
func (v *verdict) limit() int         { return int(v.v.limit) }
func (v *verdict) exempt() int        { return int(v.v.exempt) }
func (v *verdict) dryRunLimit() int   { return int(v.v.dry_run_limit) }
func (v *verdict) dryRunAction() int  { return int(v.v.dry_run_action) }
func (v *verdict) waitNS() uint64     { return uint64(v.v.wait_ns) }
func (v *verdict) retryAfterS() int64 { return int64(v.v.retry_after_s) }

// holdsPermits reports whether the engine handed the request concurrency permits, which
// weir_engine_release must give back (releasing none is a no-op, so it is skipped).
func (v *verdict) holdsPermits() bool {
	for i := range v.v.permits {
		if v.v.permits[i].limit >= 0 {
			return true
		}
	}
	return false
}

// headerLines returns the "Name: value" lines the engine emitted.
func (v *verdict) headerLines() [][2]string {
	n := int(v.v.headers_len)
	if n > headerCap {
		n = headerCap
	}
	var out [][2]string
	for _, line := range strings.Split(string(v.hbuf[:n]), "\r\n") {
		if i := strings.Index(line, ": "); i > 0 {
			out = append(out, [2]string{line[:i], line[i+2:]})
		}
	}
	return out
}

func (e *engine) evaluate(r *reqView, now uint64, v *verdict) {
	rc := C.wgo_evaluate(e.p, sptr(r.method), C.size_t(len(r.method)), sptr(r.target), C.size_t(len(r.target)),
		sptr(r.peer), C.size_t(len(r.peer)), bptr(r.headers), C.size_t(len(r.headers)), C.uint64_t(now),
		&v.v, (*C.uint8_t)(unsafe.Pointer(&v.hbuf[0])), headerCap)
	v.rc = int(rc)
}

func (e *engine) evaluateQueued(r *reqView, now uint64, v *verdict) {
	rc := C.wgo_evaluate_queued(e.p, sptr(r.method), C.size_t(len(r.method)), sptr(r.target), C.size_t(len(r.target)),
		sptr(r.peer), C.size_t(len(r.peer)), bptr(r.headers), C.size_t(len(r.headers)), C.uint64_t(now),
		&v.v, (*C.uint8_t)(unsafe.Pointer(&v.hbuf[0])), headerCap)
	v.rc = int(rc)
}

func (e *engine) abandon(v *verdict, now uint64) { C.weir_engine_abandon(e.p, &v.v, C.uint64_t(now)) }
func (e *engine) release(v *verdict, now uint64) { C.weir_engine_release(e.p, &v.v, C.uint64_t(now)) }

// failsClosed reports the policy's failure_mode = "closed" (reject when evaluation fails).
func (e *engine) failsClosed() bool { return C.weir_engine_fails_closed(e.p) != 0 }

// queueTimeout is limit i's queue timeout in ns (0 without a queue).
func (e *engine) queueTimeout(i int) uint64 {
	var ns C.uint64_t
	if C.weir_engine_limit_queue_timeout(e.p, C.size_t(i), &ns) != C.WEIR_OK {
		return 0
	}
	return uint64(ns)
}

// logLevel is limit i's log_level (weir_engine_limit_log_level: 0 info … 3 error).
func (e *engine) logLevel(i int) int { return int(C.weir_engine_limit_log_level(e.p, C.size_t(i))) }

// limitCounters is a snapshot of weir_engine_limit_counters for limit i.
type limitCounters struct {
	passed, delayed, rejected, queued, dryRunDelayed, dryRunRejected uint64
}

func (e *engine) counters(i int) (limitCounters, bool) {
	var c C.weir_limit_counters
	if C.weir_engine_limit_counters(e.p, C.size_t(i), &c) != C.WEIR_OK {
		return limitCounters{}, false
	}
	return limitCounters{uint64(c.passed), uint64(c.delayed), uint64(c.rejected), uint64(c.queued),
		uint64(c.dry_run_delayed), uint64(c.dry_run_rejected)}, true
}

// packPolicyHeaders appends the values of the headers e's policy reads, in the format
// wgo_header reads. Go keeps the Host header in r.Host, not in r.Header.
func (e *engine) packPolicyHeaders(dst []byte, r *http.Request) []byte {
	for _, h := range e.headers {
		vals := r.Header[h.key]
		for _, v := range vals {
			dst = packHeaders(dst, h.name, v)
		}
		if h.name == "host" && len(vals) == 0 && r.Host != "" {
			dst = packHeaders(dst, h.name, r.Host)
		}
	}
	return dst
}

// packHeaders appends one header line in the format wgo_header reads.
func packHeaders(dst []byte, name, value string) []byte {
	var n [4]byte
	binary.NativeEndian.PutUint32(n[:], uint32(len(name)))
	dst = append(dst, n[:]...)
	for i := 0; i < len(name); i++ {
		c := name[i]
		if c >= 'A' && c <= 'Z' {
			c += 'a' - 'A'
		}
		dst = append(dst, c)
	}
	binary.NativeEndian.PutUint32(n[:], uint32(len(value)))
	dst = append(dst, n[:]...)
	return append(dst, value...)
}

var headerPool = sync.Pool{New: func() any { b := make([]byte, 0, 2048); return &b }}

// zone is a low-level weir table with one algorithm (inline zones).
type zone struct {
	z  *C.weir_zone
	l  *C.weir_limiter
	lz *C.weir_log_zone // kindLog: the exact sliding log (z and l are nil)
}

const (
	kindSliding = iota
	kindGCRA
	kindConcurrency
	kindLog
)

// zoneParams describe a low-level zone; equal params share state across reloads.
type zoneParams struct {
	kind     int
	bytes    uint64
	events   uint64 // sliding
	windowNS uint64 // sliding
	count    uint64 // gcra: count per periodNS
	periodNS uint64
	burst    uint64
	delay    int64 // gcra: -1 nodelay, N
	max      uint64
}

// logZoneBytes is what a log zone of `events` needs for `keys` keys.
func logZoneBytes(events, keys uint64) uint64 {
	return uint64(C.weir_log_zone_bytes(C.uint64_t(events), C.size_t(keys)))
}

// zoneMinBytes is the smallest table a GCRA, sliding or concurrency zone can have.
func zoneMinBytes() uint64 { return uint64(C.weir_zone_min_bytes()) }

func newZone(p zoneParams) (*zone, error) {
	var cerr *C.weir_error
	if p.kind == kindLog {
		var lz *C.weir_log_zone
		if rc := C.weir_log_zone_new(C.size_t(p.bytes), C.uint64_t(p.events), C.uint64_t(p.windowNS), &lz, &cerr); rc != C.WEIR_OK {
			return nil, takeError(cerr, rc)
		}
		return &zone{lz: lz}, nil
	}
	var l *C.weir_limiter
	var rc C.int
	switch p.kind {
	case kindSliding:
		rc = C.weir_limiter_sliding(C.uint64_t(p.events), C.uint64_t(p.windowNS), &l, &cerr)
	case kindGCRA:
		rc = C.weir_limiter_gcra(C.uint64_t(p.count), C.uint64_t(p.periodNS), C.uint64_t(p.burst), C.int64_t(p.delay), &l, &cerr)
	default:
		rc = C.weir_limiter_concurrency(C.uint64_t(p.max), 0, &l, &cerr)
	}
	if rc != C.WEIR_OK {
		return nil, takeError(cerr, rc)
	}
	bytes := p.bytes
	if min := uint64(C.weir_zone_min_bytes()); bytes < min {
		bytes = min
	}
	var z *C.weir_zone
	if rc := C.weir_zone_new(C.size_t(bytes), C.uint64_t(1+p.kind), &z, &cerr); rc != C.WEIR_OK {
		C.weir_limiter_free(l)
		return nil, takeError(cerr, rc)
	}
	return &zone{z: z, l: l}, nil
}

func (z *zone) free() {
	C.weir_log_zone_free(z.lz)
	C.weir_zone_free(z.z)
	C.weir_limiter_free(z.l)
}

// check is one weir_check result.
type check struct {
	action                  int
	waitNS, retryNS         uint64
	limit, remaining, reset uint64
}

func fromCheck(c *C.weir_check) check {
	return check{int(c.action), uint64(c.wait_ns), uint64(c.retry_after_ns), uint64(c.limit), uint64(c.remaining), uint64(c.reset_ns)}
}

// cCheck is the C result of one zone check, kept in pooled per-request memory (reqState): a
// local handed to C would be moved to the heap on every call.
type cCheck struct{ c C.weir_check }

func (z *zone) check(key string, now uint64, out *cCheck) (check, error) {
	c := &out.c
	if z.lz != nil {
		if rc := C.weir_log_zone_check(z.lz, sptr(key), C.size_t(len(key)), C.uint64_t(now), c); rc != C.WEIR_OK {
			return check{}, fmt.Errorf("weir_log_zone_check: %d", int(rc))
		}
		return fromCheck(c), nil
	}
	if rc := C.weir_zone_check(z.z, z.l, sptr(key), C.size_t(len(key)), 1, C.uint64_t(now), c); rc != C.WEIR_OK {
		return check{}, fmt.Errorf("weir_zone_check: %d", int(rc))
	}
	return fromCheck(c), nil
}

func (z *zone) refund(key string, now uint64) {
	if z.lz != nil {
		C.weir_log_zone_refund(z.lz, sptr(key), C.size_t(len(key)), C.uint64_t(now))
		return
	}
	C.weir_zone_refund(z.z, z.l, sptr(key), C.size_t(len(key)), 1, C.uint64_t(now))
}

type permit = C.weir_permit

func (z *zone) acquire(key string, now uint64, p *permit, out *cCheck) (check, error) {
	c := &out.c
	if rc := C.weir_zone_acquire(z.z, z.l, sptr(key), C.size_t(len(key)), C.uint64_t(now), c, p); rc != C.WEIR_OK {
		return check{}, fmt.Errorf("weir_zone_acquire: %d", int(rc))
	}
	return fromCheck(c), nil
}

func (z *zone) releasePermit(p *permit, now uint64) {
	C.weir_zone_release(z.z, z.l, p, C.uint64_t(now))
}

func permitHeld(p *permit) bool { return p.limit >= 0 }

func emptyPermit() permit { return permit{limit: -1} }
