package redis

import (
	"math/rand/v2"
	"testing"
)

// crc16Bitwise is CRC-16/XMODEM computed bit by bit, as its definition
// reads.
func crc16Bitwise(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}

func TestCRC16(t *testing.T) {
	// The catalogue's check value of CRC-16/XMODEM, and Redis Cluster's
	// own example (cluster-spec: the slot of "123456789" is 12739).
	if got := crc16("123456789"); got != 0x31c3 {
		t.Fatalf("crc16(123456789) = %#x, want 0x31c3", got)
	}
	if got := keySlot("123456789"); got != 12739 {
		t.Fatalf("keySlot(123456789) = %d, want 12739", got)
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		b := make([]byte, r.IntN(64))
		for i := range b {
			b[i] = byte(r.UintN(256))
		}
		if s := string(b); crc16(s) != crc16Bitwise(s) {
			t.Fatalf("crc16(%q) = %#x, bit by bit %#x", s, crc16(s), crc16Bitwise(s))
		}
	}
}

func FuzzCRC16(f *testing.F) {
	f.Add("orders/42")
	f.Add("")
	f.Fuzz(func(t *testing.T, s string) {
		if crc16(s) != crc16Bitwise(s) {
			t.Fatalf("crc16(%q) = %#x, bit by bit %#x", s, crc16(s), crc16Bitwise(s))
		}
	})
}
