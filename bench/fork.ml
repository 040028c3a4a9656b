(* fork.ml — bench/fork_bench.py's program: N forks of a child that ends
   at once (Unix._exit), then N of Unix.system "true" (a fork and exec),
   each waited for; prints the wall time of each kind, in us per fork.
   Usage: fork.exe N *)
let () =
  let n = int_of_string Sys.argv.(1) in
  let t0 = Unix.gettimeofday () in
  for _ = 1 to n do
    match Unix.fork () with 0 -> Unix._exit 0 | pid -> ignore (Unix.waitpid [] pid)
  done;
  let t1 = Unix.gettimeofday () in
  for _ = 1 to n do ignore (Unix.system "true") done;
  let t2 = Unix.gettimeofday () in
  Printf.printf "fork %.0f system %.0f\n" ((t1 -. t0) *. 1e6 /. float n) ((t2 -. t1) *. 1e6 /. float n)
