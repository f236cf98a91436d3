/*
 * The Curator peer of t/bench/run.pl: <clients> threads, each with its own
 * CuratorFramework (its own ZooKeeper session, as each nginx worker has),
 * take and release one lock in a loop for <seconds>, with nothing done
 * while holding it (the benchmark's backend is instant too).
 *
 *   java CuratorBench <hosts> mutex|semv2 <path> <clients> <seconds> [leases]
 *
 * Prints one line: "cycles N rate R/s wait_p50 A wait_p99 B" (ms, the time
 * acquire() took).
 */

import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.concurrent.CountDownLatch;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.framework.recipes.locks.InterProcessSemaphoreV2;
import org.apache.curator.framework.recipes.locks.Lease;
import org.apache.curator.retry.RetryOneTime;


public class CuratorBench {

    public static void main(String[] args) throws Exception {
        final String hosts = args[0], kind = args[1], path = args[2];
        final int clients = Integer.parseInt(args[3]);
        final long seconds = Long.parseLong(args[4]);
        final int leases = args.length > 5 ? Integer.parseInt(args[5]) : 1;

        final List<CuratorFramework> sessions = new ArrayList<>();

        for (int i = 0; i < clients; i++) {
            CuratorFramework c = CuratorFrameworkFactory.newClient(hosts,
                10000, 5000, new RetryOneTime(100));
            c.start();
            c.blockUntilConnected();
            sessions.add(c);
        }

        final List<List<Long>> waits = new ArrayList<>();
        final CountDownLatch start = new CountDownLatch(1);
        final List<Thread> threads = new ArrayList<>();

        /* a warm-up second, as wrk has none: the JIT and the parents */
        final long[] window = new long[2];

        for (int i = 0; i < clients; i++) {
            final CuratorFramework c = sessions.get(i);
            final List<Long> mine = new ArrayList<>();
            waits.add(mine);

            Thread t = new Thread(() -> {
                try {
                    InterProcessMutex mutex = null;
                    InterProcessSemaphoreV2 sem = null;

                    if (kind.equals("mutex")) {
                        mutex = new InterProcessMutex(c, path);
                    } else {
                        sem = new InterProcessSemaphoreV2(c, path, leases);
                    }

                    start.await();

                    for (;;) {
                        long t0 = System.nanoTime();
                        if (t0 >= window[1]) {
                            break;
                        }

                        Lease lease = null;
                        if (mutex != null) {
                            mutex.acquire();
                        } else {
                            lease = sem.acquire();
                        }

                        long t1 = System.nanoTime();
                        if (t0 >= window[0]) {
                            mine.add(t1 - t0);
                        }

                        if (mutex != null) {
                            mutex.release();
                        } else {
                            lease.close();
                        }
                    }

                } catch (Exception e) {
                    e.printStackTrace();
                }
            });

            threads.add(t);
            t.start();
        }

        window[0] = System.nanoTime() + 1000000000L;
        window[1] = window[0] + seconds * 1000000000L;
        start.countDown();

        for (Thread t : threads) {
            t.join();
        }

        List<Long> all = new ArrayList<>();
        for (List<Long> w : waits) {
            all.addAll(w);
        }
        Collections.sort(all);

        int n = all.size();
        double p50 = n > 0 ? all.get(n / 2) / 1e6 : 0;
        double p99 = n > 0 ? all.get(Math.min(n - 1, n * 99 / 100)) / 1e6
                           : 0;

        System.out.printf("cycles %d rate %.1f wait_p50 %.3f wait_p99 %.3f%n",
            n, n / (double) seconds, p50, p99);

        for (CuratorFramework c : sessions) {
            c.close();
        }
    }
}
