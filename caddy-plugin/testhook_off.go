//go:build !weirtest

package weir

import "net/http"

// Production builds: the test hooks (testhook_on.go, build tag weirtest) compile to nothing.

type testCtl struct{ hold bool }

func testIntercept(*Handler, http.ResponseWriter, *http.Request, *reqEnv) (bool, error) {
	return false, nil
}
func testHold(*testCtl, []func(int, uint64))                                           {}
func testQueue(*engineState, http.ResponseWriter, *reqEnv, *reqView, *verdict, string) {}
func testReport(http.ResponseWriter, *reqEnv, string, string, *verdict)                {}
func isTestHeader(string) bool                                                         { return false }
