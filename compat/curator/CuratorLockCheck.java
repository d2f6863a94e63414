import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.concurrent.TimeUnit;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.retry.ExponentialBackoffRetry;

/**
 * Drives Apache Curator's InterProcessMutex against a ZooKeeper-protocol server, for
 * zlock's interop test (crates/zlock/tests/it/curator_interop.rs).
 *
 * <pre>
 * CuratorLockCheck &lt;connect&gt; increment &lt;lockPath&gt; &lt;counterPath&gt; &lt;n&gt;
 *     n times: acquire, read the counter znode, sleep 1 ms, write counter + 1, release.
 * CuratorLockCheck &lt;connect&gt; hold &lt;lockPath&gt;
 *     acquire, print HOLDING, wait for a line (or EOF) on stdin, release, print RELEASED.
 * CuratorLockCheck &lt;connect&gt; try &lt;lockPath&gt; &lt;timeoutMs&gt;
 *     acquire(timeout): print ACQUIRED and release (exit 0), or print NOT_ACQUIRED (exit 3).
 * </pre>
 *
 * Prints READY and the session's id (READY session 0x...) once connected. Exit codes: 0 done, 1 error, 2 usage or no connection,
 * 3 lock not acquired in time.
 */
public final class CuratorLockCheck {
    public static void main(String[] args) throws Exception {
        if (args.length < 3) {
            usage();
        }
        CuratorFramework client = CuratorFrameworkFactory.newClient(
                args[0], 10_000, 10_000, new ExponentialBackoffRetry(100, 5));
        client.start();
        int code;
        try {
            if (!client.blockUntilConnected(30, TimeUnit.SECONDS)) {
                System.err.println("CuratorLockCheck: cannot connect to " + args[0]);
                System.exit(2);
            }
            say("READY session 0x"
                    + Long.toHexString(client.getZookeeperClient().getZooKeeper().getSessionId()));
            InterProcessMutex mutex = new InterProcessMutex(client, args[2]);
            switch (args[1]) {
                case "increment":
                    code = increment(client, mutex, args);
                    break;
                case "hold":
                    code = hold(mutex);
                    break;
                case "try":
                    code = tryAcquire(mutex, args);
                    break;
                default:
                    usage();
                    code = 2;
            }
        } finally {
            client.close();
        }
        System.exit(code);
    }

    private static int increment(CuratorFramework client, InterProcessMutex mutex, String[] args)
            throws Exception {
        if (args.length != 5) {
            usage();
        }
        String counter = args[3];
        int n = Integer.parseInt(args[4]);
        for (int i = 0; i < n; i++) {
            mutex.acquire();
            try {
                byte[] data = client.getData().forPath(counter);
                long value = Long.parseLong(new String(data, StandardCharsets.UTF_8).trim());
                Thread.sleep(1);
                byte[] next = Long.toString(value + 1).getBytes(StandardCharsets.UTF_8);
                client.setData().forPath(counter, next);
            } finally {
                mutex.release();
            }
        }
        say("DONE " + n);
        return 0;
    }

    private static int hold(InterProcessMutex mutex) throws Exception {
        mutex.acquire();
        say("HOLDING");
        BufferedReader in = new BufferedReader(
                new InputStreamReader(System.in, StandardCharsets.UTF_8));
        in.readLine();
        mutex.release();
        say("RELEASED");
        return 0;
    }

    private static int tryAcquire(InterProcessMutex mutex, String[] args) throws Exception {
        if (args.length != 4) {
            usage();
        }
        long timeoutMs = Long.parseLong(args[3]);
        if (!mutex.acquire(timeoutMs, TimeUnit.MILLISECONDS)) {
            say("NOT_ACQUIRED");
            return 3;
        }
        say("ACQUIRED");
        mutex.release();
        return 0;
    }

    private static void say(String line) {
        System.out.println(line);
        System.out.flush();
    }

    private static void usage() {
        System.err.println("usage: CuratorLockCheck <connect> increment <lockPath> <counterPath> <n>\n"
                + "       CuratorLockCheck <connect> hold <lockPath>\n"
                + "       CuratorLockCheck <connect> try <lockPath> <timeoutMs>");
        System.exit(2);
    }
}
