//go:build unix && !linux

package main

// onlyZombies reports false: without Linux's /proc the members of a group
// cannot be listed, so a zombie counts as a member. Where init collects
// orphans promptly (launchd, BSD init), zombies do not linger in the group.
func onlyZombies(int) bool { return false }
