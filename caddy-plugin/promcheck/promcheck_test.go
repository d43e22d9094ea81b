package promcheck

import "testing"

func TestCheck(t *testing.T) {
	good := "# HELP a_total A.\n# TYPE a_total counter\na_total{z=\"x\"} 1\na_total{z=\"y\"} 2\n" +
		"# HELP h H.\n# TYPE h histogram\nh_bucket{le=\"+Inf\"} 1\nh_sum 1\nh_count 1\n"
	if err := Check([]byte(good)); err != nil {
		t.Fatalf("valid text refused: %v", err)
	}
	for name, bad := range map[string]string{
		"second TYPE":  "# TYPE a gauge\na 1\n# TYPE a gauge\na{z=\"y\"} 2\n",
		"no TYPE":      "# HELP a A.\na 1\n",
		"no HELP":      "# TYPE a gauge\na 1\n",
		"interleaved":  "# HELP a A.\n# TYPE a gauge\n# HELP b B.\n# TYPE b gauge\na 1\nb 1\n",
		"split family": "# HELP a A.\n# TYPE a gauge\na 1\n# HELP b B.\n# TYPE b gauge\nb 1\na{z=\"y\"} 2\n",
		"garbage":      "a{ 1\n",
	} {
		if Check([]byte(bad)) == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
