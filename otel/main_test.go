package otel_test

import (
	"os"
	"testing"

	"github.com/dlock-go/dlock/internal/testenv"
)

func TestMain(m *testing.M) { os.Exit(testenv.Run(m)) }
