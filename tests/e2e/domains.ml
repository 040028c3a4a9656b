(* domains.ml — e2e program: two spawned domains doing different work. Domain
   A only calls [work_a] (integer hashing), domain B only calls [work_b] (float
   math); the main domain just waits in Domain.join. The checker asserts that
   each domain's samples are dominated by its own function.
   Usage: domains.exe [PERCENT]  (default 100 = ~1.5 s of CPU per domain) *)

let[@inline never] work_a n =
  let acc = ref 7 in
  for i = 1 to n do
    acc := (!acc * 31 + i) land 0xffffff
  done;
  !acc

let[@inline never] work_b n =
  let x = ref 0.5 in
  for i = 1 to n do
    x := !x +. (1.0 /. float_of_int (i + 1)) *. 0.5;
    if !x > 10.0 then x := !x -. 9.0
  done;
  int_of_float (!x *. 1000.0)

let () =
  let percent = if Array.length Sys.argv > 1 then int_of_string Sys.argv.(1) else 100 in
  let n = 15_000_000 * percent / 100 in
  let da = Domain.spawn (fun () -> let r = ref 0 in for _ = 1 to 100 do r := !r + work_a n done; !r) in
  let db = Domain.spawn (fun () -> let r = ref 0 in for _ = 1 to 100 do r := !r + work_b n done; !r) in
  let ra = Domain.join da and rb = Domain.join db in
  Printf.printf "domains: a=%d b=%d\n" ra rb
