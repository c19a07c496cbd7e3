//go:build !unix

package conformance

import (
	"errors"
	"os"
)

const signalsSupported = false

var errNoSignals = errors.New("conformance: process signals are not supported here")

func pauseProcess(*os.Process) error  { return errNoSignals }
func resumeProcess(*os.Process) error { return errNoSignals }
