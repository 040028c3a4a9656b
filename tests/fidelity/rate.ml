(* tests/fidelity/rate.ml — one busy thread for a fixed amount of its own
   CPU time; prints the thread's CPU seconds so test_fidelity.py can compare the
   samples delivered with the asked rate.
   Usage: rate.exe [SCALE]  (SCALE multiplies the amount of work; default 1) *)

external thread_cputime : unit -> float = "fid_thread_cputime"

let scale = if Array.length Sys.argv > 1 then float_of_string Sys.argv.(1) else 1.0
let scaled n = max 1 (int_of_float (scale *. float_of_int n))

let[@inline never] spin seed =
  let acc = ref seed in
  for i = 1 to 1_000_000 do
    acc := (!acc * 31) + i
  done;
  !acc

let () =
  let acc = ref 0 in
  for _ = 1 to scaled 1_800 do
    acc := spin !acc
  done;
  ignore (Sys.opaque_identity !acc);
  Printf.printf "rate: thread_cpu %.6f process_cpu %.6f\n" (thread_cputime ()) (Sys.time ())
