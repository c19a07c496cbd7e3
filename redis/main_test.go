package redis

import (
	"os"
	"testing"

	"github.com/dlock-go/dlock/internal/childproc"
	"github.com/dlock-go/dlock/internal/testenv"
)

func TestMain(m *testing.M) {
	childproc.Serve(childEnv, serveChild)
	os.Exit(testenv.Run(m))
}
