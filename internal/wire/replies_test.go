package wire

import "testing"

func TestParseLeaseReadsWhatTheScriptsWrite(t *testing.T) {
	for _, c := range []struct {
		value         string
		owner, holder string
		fence         int64
		ok            bool
	}{
		{"o:7", "o", "", 7, true},
		{"o:7:vm 1", "o", "vm 1", 7, true},
		{"o:7:vm 1\x00", "o", "vm 1", 7, true},                    // waited for
		{"o:7:vm:1\x00" + "1500", "o", "vm:1", 7, true},           // a lock delay (LeaseTail)
		{"o:7:\x00" + "1500\x00", "o", "", 7, true},               // a lock delay, no description, waited for
		{"broken:7:vm 1\x00" + "1500", "broken", "vm 1", 7, true}, // broken (break.lua)
		{"o:x", "", "", 0, false},
		{"o:0", "o", "", 0, false},
		{":7", "", "", 0, false},
	} {
		owner, fence, holder, ok := ParseLease(c.value)
		if ok != c.ok || ok && (owner != c.owner || fence != c.fence || holder != c.holder) {
			t.Errorf("ParseLease(%q) = %q, %d, %q, %v; want %q, %d, %q, %v",
				c.value, owner, fence, holder, ok, c.owner, c.fence, c.holder, c.ok)
		}
	}
	if got := LeaseTail("vm 1", 0); got != "vm 1" {
		t.Errorf("LeaseTail without a delay = %q", got)
	}
	if got := LeaseTail("vm 1", 1500); got != "vm 1\x00"+"1500" {
		t.Errorf("LeaseTail with a delay = %q", got)
	}
}

func TestParseWake(t *testing.T) {
	for _, tc := range []struct {
		msg          string
		owner        string
		fence, stamp int64
		handed       bool
	}{
		{"o1", "o1", 0, 0, false},              // a wake-up
		{"o1:17:25012", "o1", 17, 25012, true}, // a handoff
		{"o1:17:0", "o1", 17, 0, true},         // from the wait's first attempt
		{"o1:0:5", "o1", 0, 0, false},          // no fence
		{"o1:17", "o1", 0, 0, false},           // no stamp
		{"o1:17:-5", "o1", 0, 0, false},        // a stamp no waiter sent
		{"o1:x:5", "o1", 0, 0, false},
	} {
		owner, fence, stamp, handed := ParseWake(tc.msg)
		if owner != tc.owner || fence != tc.fence || stamp != tc.stamp || handed != tc.handed {
			t.Errorf("ParseWake(%q) = %q, %d, %d, %v; want %q, %d, %d, %v", tc.msg, owner, fence, stamp, handed,
				tc.owner, tc.fence, tc.stamp, tc.handed)
		}
	}
}
