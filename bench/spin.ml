(* bench/spin.ml — arithmetic only, for what each sample costs
   (bench/engine_bench.py `cost`): a fixed amount of work (so that what a
   profiler adds shows as more CPU time), no allocation, no system call,
   one stack (a recursion ~30 frames deep).
   Usage: spin.exe [ROUNDS]  (default 1000: about 1 s here). *)

let rounds = if Array.length Sys.argv > 1 then int_of_string Sys.argv.(1) else 1000

let[@inline never] rec fib n = if n < 2 then n else fib (n - 1) + fib (n - 2)

let () =
  let acc = ref 0 in
  for _ = 1 to rounds do
    acc := !acc + fib 27
  done;
  Printf.printf "spin: %d\n" (!acc land 1)
