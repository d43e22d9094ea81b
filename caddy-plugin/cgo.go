package weir

/*
// weir.h and the prebuilt library sit in lib/ beside these sources (the release tarball ships
// them there; in the repository `make caddy-lib` copies them there), so the module builds
// wherever it is unpacked.
#cgo CFLAGS: -I${SRCDIR}/lib
#cgo linux,amd64 LDFLAGS: ${SRCDIR}/lib/linux_amd64/libweir_caddy.a
#cgo linux,arm64 LDFLAGS: ${SRCDIR}/lib/linux_arm64/libweir_caddy.a
#cgo LDFLAGS: -lm -ldl -lpthread -lrt -lutil -lgcc_s
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
// Variables (inline zones' keys) are packed the same way without names, one [u32 len][value]
// per variable index.
typedef struct {
	const uint8_t *buf; size_t len;
	size_t last_nth, last_name, last_name_len, next;
	const uint8_t *vars; size_t vars_len;
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

static int wgo_var(void *ctx, size_t index, const uint8_t **value, size_t *value_len) {
	wgo_headers *h = (wgo_headers *) ctx;
	size_t off = 0;
	for (size_t i = 0; off + 4 <= h->vars_len; i++) {
		uint32_t n;
		memcpy(&n, h->vars + off, 4); off += 4;
		if (off + n > h->vars_len) return 0;
		if (i == index) {
			*value = h->vars + off; *value_len = n;
			return 1;
		}
		off += n;
	}
	return 0;
}

// wgo_decision is weir_log_decision without pointers: the action word copied (at most 14
// bytes, "dry-run-reject"). cgo checks at run time every argument that points to memory
// holding pointers; this one holds none, so the request's cgo call is not checked for it.
typedef struct {
	int32_t limit;
	uint8_t action_len;
	uint8_t action[15];
} wgo_decision;

// wgo_evaluate runs one evaluation (one cgo call): the policy's, or the limits at sel (nsel
// of them, the inline zones a request matches) when sel is not NULL; first, or again for a
// queued verdict. (Go pointers only as arguments: cgo forbids Go memory holding them.)
static int wgo_evaluate(const weir_engine *e, const uint8_t *m, size_t ml, const uint8_t *t,
                        size_t tl, const uint8_t *p, size_t pl, const uint8_t *hb, size_t hl,
                        const uint8_t *vb, size_t vl, const uint16_t *sel, size_t nsel, int queued,
                        uint64_t now, weir_verdict *v, uint8_t *buf, size_t cap,
                        wgo_decision *d) {
	weir_log_decision ld;
	wgo_headers h = { hb, hl, SIZE_MAX, 0, 0, 0, vb, vl };
	weir_request r = {0};
	int rc;
	r.method = m; r.method_len = ml; r.target = t; r.target_len = tl;
	r.peer = p; r.peer_len = pl;
	r.header = hl ? wgo_header : NULL; r.header_ctx = &h;
	r.var = vl ? wgo_var : NULL;
	if (sel != NULL) {
		v->headers_len = 0;
		rc = queued ? weir_engine_evaluate_selected_queued(e, &r, sel, nsel, now, v)
		            : weir_engine_evaluate_selected(e, &r, sel, nsel, now, v);
	} else {
		rc = queued ? weir_engine_evaluate_queued(e, &r, now, v, buf, cap)
		            : weir_engine_evaluate(e, &r, now, v, buf, cap);
	}
	d->limit = -1;
	d->action_len = 0;
	if (rc == WEIR_OK && weir_engine_log_decision(e, v, WEIR_STYLE_POLICY, &ld) == WEIR_OK
	    && ld.action_len <= sizeof d->action) {
		d->limit = ld.limit;
		d->action_len = (uint8_t)ld.action_len;
		memcpy(d->action, ld.action, ld.action_len);
	}
	return rc;
}

// wgo_render_key writes limit's key for the request as wgo_evaluate saw it (same arguments).
static size_t wgo_render_key(const weir_engine *e, int32_t limit, const uint8_t *m, size_t ml,
                             const uint8_t *t, size_t tl, const uint8_t *p, size_t pl,
                             const uint8_t *hb, size_t hl, const uint8_t *vb, size_t vl,
                             uint8_t *buf, size_t cap) {
	wgo_headers h = { hb, hl, SIZE_MAX, 0, 0, 0, vb, vl };
	weir_request r = {0};
	size_t n = 0;
	r.method = m; r.method_len = ml; r.target = t; r.target_len = tl;
	r.peer = p; r.peer_len = pl;
	r.header = hl ? wgo_header : NULL; r.header_ctx = &h;
	r.var = vl ? wgo_var : NULL;
	if (weir_engine_render_key(e, limit, &r, buf, cap, &n) != WEIR_OK) {
		return 0;
	}
	return n;
}

// wgo_key_request answers a key operation (weir_key_request) with the request's headers
// packed as for wgo_evaluate (hb, hl) and write (1: changes enabled).
static int wgo_key_request(const weir_engine *const *engines, size_t n, const uint8_t *m,
                           size_t ml, const uint8_t *q, size_t ql, const uint8_t *hb, size_t hl,
                           int write, uint64_t now, uint8_t *buf, size_t cap, size_t *written,
                           uint16_t *status, weir_log_line *audit) {
	wgo_headers h = { hb, hl, SIZE_MAX, 0, 0, 0, NULL, 0 };
	weir_key_access a;
	a.write = write;
	a.header = hl ? wgo_header : NULL;
	a.header_ctx = &h;
	return weir_key_request(engines, n, m, ml, q, ql, &a, now, buf, cap, written, status, audit);
}

// wgo_name reads the name of limit (kind 0), header (1) or variable (2) i of engine e.
static int wgo_name(const weir_engine *e, int kind, size_t i, const uint8_t **p, size_t *l) {
	switch (kind) {
	case 0: return weir_engine_limit_name(e, i, p, l);
	case 1: return weir_engine_header_name(e, i, p, l);
	default: return weir_engine_var_name(e, i, p, l);
	}
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
	// vars are the variables (`var:NAME` key parts) the engine asks for, by index.
	vars []string
}

// policyHeader is a header the policy reads: its key in Go's http.Header and weir's name.
type policyHeader struct {
	key, name string
}

// newEngine parses policy text (name appears in error messages as name:line:col).
func newEngine(text []byte, name string) (*engine, error) {
	pol, err := parsePolicy(text, name)
	if err != nil {
		return nil, err
	}
	defer C.weir_policy_free(pol)
	var e *C.weir_engine
	var cerr *C.weir_error
	if rc := C.weir_engine_new(pol, &e, &cerr); rc != C.WEIR_OK {
		return nil, takeError(cerr, rc)
	}
	return describe(e), nil
}

// Kinds of names an engine hands out (wgo_name).
const (
	nameLimit = iota
	nameHeader
	nameVar
)

// cName is the name of the engine's limit, header or variable i; ok false past the end.
func cName(e *C.weir_engine, kind, i int) (string, bool) {
	var p *C.uint8_t
	var l C.size_t
	if C.wgo_name(e, C.int(kind), C.size_t(i), &p, &l) != C.WEIR_OK {
		return "", false
	}
	return C.GoStringN((*C.char)(unsafe.Pointer(p)), C.int(l)), true
}

// describe wraps e, reading the names of its limits, headers and variables once.
func describe(e *C.weir_engine) *engine {
	eng := &engine{p: e}
	n := int(C.weir_engine_limit_count(e))
	for i := 0; i < n; i++ {
		name, ok := cName(e, nameLimit, i)
		if !ok {
			name = fmt.Sprintf("limit%d", i)
		}
		eng.limits = append(eng.limits, name)
	}
	for i := 0; ; i++ {
		name, ok := cName(e, nameHeader, i)
		if !ok {
			break
		}
		if !isTestHeader(name) { // the test harness's own headers are never the request's
			eng.headers = append(eng.headers, policyHeader{textproto.CanonicalMIMEHeaderKey(name), name})
		}
	}
	for i := 0; ; i++ {
		name, ok := cName(e, nameVar, i)
		if !ok {
			break
		}
		eng.vars = append(eng.vars, name)
	}
	return eng
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

// reqView is what the engine needs of one request.
type reqView struct {
	method, target, peer string
	headers              []byte // packed, see wgo_header
	// Inline zones: the limits the request's zones select (nil: the policy's evaluation of
	// all its limits) and the variables their keys read, packed by index (see wgo_var).
	sel  []uint16
	vars []byte
}

// verdict is a weir_verdict plus the response header lines the engine wrote.
type verdict struct {
	v    C.weir_verdict
	d    C.wgo_decision // what access logs show of it (weir_engine_log_decision)
	rc   int
	hbuf [headerCap]byte
}

// logWords are the decision words the engine names (weir_log_decision's action).
var logWords = [...]string{"pass", "exempt", "delay", "queue", "reject", "dry-run-delay", "dry-run-reject"}

// logAction is the decision's word for access logs ("pass", "reject", "dry-run-reject" …):
// one of logWords, so nothing is allocated (another word is copied).
func (v *verdict) logAction() string {
	b := unsafe.Slice((*byte)(unsafe.Pointer(&v.d.action[0])), int(v.d.action_len))
	for _, w := range logWords {
		if string(b) == w {
			return w
		}
	}
	return string(b)
}

// logLimit is the index of the limit the decision names, or -1.
func (v *verdict) logLimit() int { return int(v.d.limit) }

func (v *verdict) action() int        { return int(v.v.action) }
func (v *verdict) status() int        { return int(v.v.status) }
func (v *verdict) limit() int         { return int(v.v.limit) }
func (v *verdict) exempt() int        { return int(v.v.exempt) }
func (v *verdict) dryRunLimit() int   { return int(v.v.dry_run_limit) }
func (v *verdict) dryRunAction() int  { return int(v.v.dry_run_action) }
func (v *verdict) waitNS() uint64     { return uint64(v.v.wait_ns) }
func (v *verdict) retryAfterS() int64 { return int64(v.v.retry_after_s) }
func (v *verdict) banned() bool       { return v.v.banned != 0 }

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

// queueID names a queue: a concurrency limit and a key. A permit given back frees a slot
// for the waiters of its queue.
type queueID struct {
	limit int32
	key   uint64
}

// ticket is a copy of a queued verdict's place (read by weir_engine_queue_lifo).
type ticket struct{ p C.weir_permit }

// queue is the queue a queued verdict waits in.
func (v *verdict) queue() queueID {
	return queueID{int32(v.v.ticket.limit), uint64(C.weir_ticket_queue_key(&v.v.ticket))}
}

func (v *verdict) ticketCopy() ticket { return ticket{v.v.ticket} }

// maxPermits is how many permits a verdict holds at most.
const maxPermits = C.WEIR_MAX_PERMITS

// permitQueues writes the queues v's permits, once given back, free a slot for to qs and
// returns how many.
func (v *verdict) permitQueues(qs *[maxPermits]queueID) int {
	n := 0
	for i := range v.v.permits {
		if p := &v.v.permits[i]; p.limit >= 0 {
			qs[n] = queueID{int32(p.limit), uint64(p.key_hash)}
			n++
		}
	}
	return n
}

// queueLifo reports whether t's queue stands: a freed slot goes to its newest waiter.
func (e *engine) queueLifo(t *ticket, now uint64) bool {
	return C.weir_engine_queue_lifo(e.p, &t.p, C.uint64_t(now)) == 1
}

// holdsCharges reports whether the engine handed the request deferred charges (its
// charge_on_status limits), which weir_engine_charge must hand back with the response status.
func (v *verdict) holdsCharges() bool { return v.v.charges[0].limit >= 0 }

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

// evaluate evaluates r (queued: again, with the WEIR_QUEUE verdict in v) into v.
func (e *engine) evaluate(r *reqView, now uint64, v *verdict, queued bool) {
	var sel *C.uint16_t
	if r.sel != nil {
		sel = (*C.uint16_t)(unsafe.Pointer(unsafe.SliceData(r.sel)))
	}
	q := C.int(0)
	if queued {
		q = 1
	}
	rc := C.wgo_evaluate(e.p, sptr(r.method), C.size_t(len(r.method)), sptr(r.target), C.size_t(len(r.target)),
		sptr(r.peer), C.size_t(len(r.peer)), bptr(r.headers), C.size_t(len(r.headers)),
		bptr(r.vars), C.size_t(len(r.vars)), sel, C.size_t(len(r.sel)), q, C.uint64_t(now),
		&v.v, (*C.uint8_t)(unsafe.Pointer(&v.hbuf[0])), headerCap, &v.d)
	v.rc = int(rc)
}

// renderKey is limit's key for r as the engine renders it for logs (only asked when a limit
// decided: the pass path renders nothing).
func (e *engine) renderKey(r *reqView, limit int) string {
	var buf [512]byte
	n := C.wgo_render_key(e.p, C.int32_t(limit), sptr(r.method), C.size_t(len(r.method)),
		sptr(r.target), C.size_t(len(r.target)), sptr(r.peer), C.size_t(len(r.peer)),
		bptr(r.headers), C.size_t(len(r.headers)), bptr(r.vars), C.size_t(len(r.vars)),
		(*C.uint8_t)(unsafe.Pointer(&buf[0])), C.size_t(len(buf)))
	return string(buf[:n])
}

func (e *engine) abandon(v *verdict, now uint64) { C.weir_engine_abandon(e.p, &v.v, C.uint64_t(now)) }
func (e *engine) release(v *verdict, now uint64) { C.weir_engine_release(e.p, &v.v, C.uint64_t(now)) }

// releaseSampled gives v's permits back with the backend's time for the request (latency, 0:
// unknown) and the response status (0: none): it teaches learned limits (max = "auto") and
// feeds the latency figures of the concurrency limits held.
func (e *engine) releaseSampled(v *verdict, latency time.Duration, status int, now uint64) {
	if status < 0 || status > 999 {
		status = 0
	}
	C.weir_engine_release_sampled(e.p, &v.v, C.uint64_t(max(latency, 0)), C.uint16_t(status), C.uint64_t(now))
}

// charge charges v's deferred charges for a response of status (0: none; charges nothing).
func (e *engine) charge(v *verdict, status int, now uint64) {
	if status < 0 || status > 999 {
		status = 0
	}
	C.weir_engine_charge(e.p, &v.v, C.uint16_t(status), C.uint64_t(now))
}

// banLine is the engine's log line for the ban verdict v started ("" when it started none):
// `banning key "K" for Ns by weir limit "NAME"`, the last line of weir_engine_outcome.
func (e *engine) banLine(v *verdict) string {
	if v.v.ban_s == 0 {
		return ""
	}
	var o C.weir_outcome
	if C.weir_engine_outcome(e.p, &v.v, C.WEIR_STYLE_POLICY, &o) != C.WEIR_OK || o.lines == 0 {
		return ""
	}
	l := o.line[o.lines-1]
	return C.GoStringN((*C.char)(unsafe.Pointer(&l.text[0])), C.int(l.len))
}

// failsClosed reports the policy's failure_mode = "closed" (reject when evaluation fails).
func (e *engine) failsClosed() bool { return C.weir_engine_fails_closed(e.p) != 0 }

// logLevel is limit i's log_level (weir_engine_limit_log_level: 0 info … 3 error).
func (e *engine) logLevel(i int) int { return int(C.weir_engine_limit_log_level(e.p, C.size_t(i))) }

// prometheus is the engine's counters in Prometheus text (weir_engine_prometheus).
func (e *engine) prometheus() []byte {
	return rendered(16<<10, func(buf []byte, n *C.size_t) C.int {
		return C.weir_engine_prometheus(e.p, bptr(buf), C.size_t(len(buf)), n)
	})
}

// rendered calls render (the C ABI's buffer contract: weir_metrics) with a buffer of size
// bytes, then larger ones until the text fits; nil on another error.
func rendered(size int, render func(buf []byte, n *C.size_t) C.int) []byte {
	buf := make([]byte, size)
	for {
		var n C.size_t
		rc := render(buf, &n)
		switch {
		case rc == C.WEIR_OK:
			return buf[:n]
		case rc == C.WEIR_ERR_BUFFER_TOO_SMALL && int(n) >= len(buf):
			buf = make([]byte, 2*int(n)) // counters may gain digits meanwhile
		default:
			return nil
		}
	}
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

// logZoneBytes is what a log zone of `events` needs for `keys` keys.
func logZoneBytes(events, keys uint64) uint64 {
	return uint64(C.weir_log_zone_bytes(C.uint64_t(events), C.size_t(keys)))
}

// zoneMinBytes is the smallest table a GCRA, sliding or concurrency zone can have.
func zoneMinBytes() uint64 { return uint64(C.weir_zone_min_bytes()) }

// handles lists the weir_engine pointers of engines (nil entries skipped) for the C ABI's
// engine lists: the first one (nil when there is none) and their number.
func handles(engines []*engine) (**C.weir_engine, C.size_t) {
	ptrs := make([]*C.weir_engine, 0, len(engines))
	for _, e := range engines {
		if e != nil {
			ptrs = append(ptrs, e.p)
		}
	}
	if len(ptrs) == 0 {
		return nil, 0
	}
	return &ptrs[0], C.size_t(len(ptrs)) // Go memory holding C pointers only: cgo may take it
}

// statusJSON renders engines (nil entries skipped) as one JSON status (weir_metrics with
// WEIR_FORMAT_JSON: totals summed, limits and zones listed in turn; docs/METRICS.md).
func statusJSON(engines []*engine) []byte {
	first, n := handles(engines)
	return rendered(64<<10, func(buf []byte, w *C.size_t) C.int {
		return C.weir_metrics(first, n, C.WEIR_FORMAT_JSON, bptr(buf), C.size_t(len(buf)), w)
	})
}

// statusPage renders the status page (WEIR_FORMAT_HTML; the same for any engines) and the
// headers to send with it (weir_page_header: its Content-Security-Policy first).
func statusPage() (page []byte, headers [][2]string) {
	page = rendered(128<<10, func(buf []byte, w *C.size_t) C.int { // the page is about 71 KB
		return C.weir_metrics(nil, 0, C.WEIR_FORMAT_HTML, bptr(buf), C.size_t(len(buf)), w)
	})
	for i := 0; ; i++ {
		var name, value *C.char
		if C.weir_page_header(C.size_t(i), &name, &value) != C.WEIR_OK {
			return page, headers
		}
		headers = append(headers, [2]string{C.GoString(name), C.GoString(value)})
	}
}

// isKeyQuery reports whether a status request's raw query is a key operation
// (weir_key_query: it has a key argument).
func isKeyQuery(query string) bool { return C.weir_key_query(sptr(query), C.size_t(len(query))) != 0 }

// keyAnswer is weir_key_request's answer: the JSON body with its HTTP status and, when a
// change was carried out, the audit line and its level (0 info .. 3 error; audit "" otherwise).
type keyAnswer struct {
	status int
	body   []byte
	audit  string
	level  int
}

// keyRequest answers a key operation (weir_key_request) on the first of engines (nil
// entries skipped) with a limit named in query; headers are the request's as packHeaders
// packs them, write whether changes are enabled; ok false when the C ABI wrote no answer.
func keyRequest(engines []*engine, method, query string, headers []byte, write bool, now uint64) (a keyAnswer, ok bool) {
	first, n := handles(engines)
	buf := make([]byte, C.WEIR_KEY_ANSWER_MAX)
	var written C.size_t
	var status C.uint16_t
	var audit C.weir_log_line
	w := C.int(0)
	if write {
		w = 1
	}
	if C.wgo_key_request(first, n, sptr(method), C.size_t(len(method)), sptr(query),
		C.size_t(len(query)), bptr(headers), C.size_t(len(headers)), w, C.uint64_t(now),
		bptr(buf), C.size_t(len(buf)), &written, &status, &audit) != C.WEIR_OK {
		return a, false
	}
	a = keyAnswer{status: int(status), body: buf[:written], level: int(audit.level)}
	if audit.len > 0 {
		a.audit = C.GoStringN((*C.char)(unsafe.Pointer(&audit.text[0])), C.int(audit.len))
	}
	return a, true
}
