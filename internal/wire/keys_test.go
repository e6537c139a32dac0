package wire

import "testing"

// The fence counter is the hash slot's: every key of the table hashes to
// its slot, and a resource's counter key shares the resource's slot.
func TestSlotTagsHashToTheirSlots(t *testing.T) {
	if len(slotTags) != 3*NumSlots {
		t.Fatalf("slotTags holds %d bytes, want %d", len(slotTags), 3*NumSlots)
	}
	for s := range NumSlots {
		if got := int(CRC16(SlotTag(s)) % NumSlots); got != s {
			t.Fatalf("tag of slot %d hashes to %d", s, got)
		}
	}
	if got := CRC16("123456789"); got != 0x31C3 {
		t.Fatalf("CRC16(123456789) = %#x, want 0x31C3 (CRC16-XMODEM, as Redis Cluster hashes)", got)
	}
	for _, r := range []string{"r", "order:42", "{tenant}:a", "a}b", "ü"} {
		k := KeysOf("redlease:", r)
		if SlotOf(r) != SlotOf(k.Fence[len("redlease:")+1:]) {
			t.Errorf("%q: its counter %s is in another slot", r, k.Fence)
		}
	}
}

// A resource's keys are cut from one allocation: the size KeysOf reserves
// is not too small.
func TestKeysAreOneAllocation(t *testing.T) {
	for _, prefix := range []string{"", "redlease:", "a-much-longer-prefix:"} {
		if n := testing.AllocsPerRun(100, func() { _ = KeysOf(prefix, "billing:42") }); n != 1 {
			t.Errorf("prefix %q: %v allocations, want 1", prefix, n)
		}
	}
}

func TestLeaderChannelIsTheLeaseKeysWithItsLastWordChanged(t *testing.T) {
	k := KeysOf("lease:lease:", "a:lease")
	if got, want := k.LeaderChannel(), "lease:lease:{a:lease}:leader"; got != want {
		t.Errorf("LeaderChannel() = %q, want %q", got, want)
	}
}
