package redlease

import (
	_ "embed"

	"github.com/redis/go-redis/v9"
)

// The scripts are loaded into Redis on first use and then run by EVALSHA;
// redis.Script.Run falls back to EVAL when the server answers NOSCRIPT (after
// a restart or SCRIPT FLUSH). Each script's header states its keys, arguments
// and reply.
var (
	//go:embed queue.lua
	queueSrc string

	//go:embed acquire.lua
	acquireSrc    string
	acquireScript = redis.NewScript(queueSrc + acquireSrc)

	//go:embed acquire_all.lua
	acquireAllSrc    string
	acquireAllScript = redis.NewScript(queueSrc + acquireAllSrc)

	//go:embed confirm.lua
	confirmSrc    string
	confirmScript = redis.NewScript(confirmSrc)

	//go:embed refresh.lua
	refreshSrc    string
	refreshScript = redis.NewScript(refreshSrc)

	//go:embed release.lua
	releaseSrc    string
	releaseScript = redis.NewScript(queueSrc + releaseSrc)

	//go:embed break.lua
	breakSrc    string
	breakScript = redis.NewScript(queueSrc + breakSrc)

	//go:embed inspect.lua
	inspectSrc    string
	inspectScript = redis.NewScript(inspectSrc)
)
