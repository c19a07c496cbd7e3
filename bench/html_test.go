package bench

import (
	"bytes"
	"context"
	"image"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// chromium finds a headless browser, or skips (fails with
// DLOCK_REQUIRE_BACKENDS=1) when there is none.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	msg := "chromium not found; run scripts/install-backends.sh --chromium (apt-get install chromium)"
	if os.Getenv("DLOCK_REQUIRE_BACKENDS") == "1" {
		t.Fatal(msg + " (DLOCK_REQUIRE_BACKENDS=1: missing tools fail)")
	}
	t.Skip(msg)
	return ""
}

func runChromium(t *testing.T, bin string, args ...string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	base := []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
		"--disable-dev-shm-usage", "--no-first-run", "--hide-scrollbars", "--user-data-dir=" + t.TempDir()}
	cmd := exec.CommandContext(ctx, bin, append(base, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("chromium %v: %v\n%s", args, err, stderr.String())
	}
	return out
}

// TestHTMLChartsDrawInHeadlessChromium renders index.html offline in
// headless Chromium and checks that every chart drew: each chart's
// element holds a canvas in the DOM after the scripts ran, and a
// screenshot of the page is not blank.
func TestHTMLChartsDrawInHeadlessChromium(t *testing.T) {
	bin := chromium(t)
	rep := memReport(t)
	dir := t.TempDir()
	if err := rep.WriteFiles(dir); err != nil {
		t.Fatal(err)
	}
	page := "file://" + filepath.Join(dir, "index.html")
	nCharts := len(rep.charts())
	if nCharts < 6 {
		t.Fatalf("the report has %d charts, want at least 6 (every workload)", nCharts)
	}

	dom := string(runChromium(t, bin, "--virtual-time-budget=5000", "--dump-dom", page))
	if got := strings.Count(dom, "<canvas"); got < nCharts {
		t.Fatalf("after rendering, the DOM holds %d canvas elements for %d charts: a chart did not draw", got, nCharts)
	}
	if !strings.Contains(dom, `_echarts_instance_`) {
		t.Fatal("no element was claimed by an ECharts instance")
	}

	shot := filepath.Join(dir, "shot.png")
	runChromium(t, bin, "--virtual-time-budget=5000", "--window-size=1200,2400", "--screenshot="+shot, page)
	f, err := os.Open(shot)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatal(err)
	}
	if n := colours(img); n < 50 {
		t.Fatalf("the screenshot has %d distinct colours: blank or unstyled (charts draw many)", n)
	}
	if keep := os.Getenv("DLOCKBENCH_KEEP_SCREENSHOT"); keep != "" {
		b, _ := os.ReadFile(shot)
		os.WriteFile(keep, b, 0o644)
	}
}

// colours counts the distinct colours of an image (up to 10 000).
func colours(img image.Image) int {
	seen := map[[3]uint32]bool{}
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y += 2 {
		for x := b.Min.X; x < b.Max.X; x += 2 {
			r, g, bl, _ := img.At(x, y).RGBA()
			seen[[3]uint32{r >> 8, g >> 8, bl >> 8}] = true
			if len(seen) >= 10000 {
				return len(seen)
			}
		}
	}
	return len(seen)
}
