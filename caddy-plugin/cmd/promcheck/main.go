// Command promcheck reads Prometheus text exposition on stdin and exits non-zero, naming the
// problem, unless it is valid for a strict parser (see package promcheck). Tests of every host
// (nginx's weir_status, Caddy's /metrics) run their output through it.
package main

import (
	"fmt"
	"io"
	"os"

	"github.com/weir-rs/weir/caddy-plugin/promcheck"
)

func main() {
	text, err := io.ReadAll(os.Stdin)
	if err == nil {
		err = promcheck.Check(text)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "promcheck:", err)
		os.Exit(1)
	}
}
