(* mmapth: a program whose memory use depends on glibc's mmap threshold
   (large blocks mapped and unmapped, or carved from the heap), which glibc
   moves for the whole process when any mapped block is freed. It says how
   blocks of a few sizes are served before and after some work; under the
   profiler it must say the same as alone. *)
external mapped : int -> bool = "mmapth_mapped" [@@noalloc]

(* Each probe frees what it asked for, so it moves the threshold too: sizes
   in increasing order, the later probe's above the earlier's. *)
let probe when_ sizes =
  Printf.printf "%s:" when_;
  List.iter (fun n -> Printf.printf " %dK=%s" (n / 1024) (if mapped n then "mapped" else "heap")) sizes;
  print_newline ()

let work rounds =
  let h = Hashtbl.create 1024 in
  let acc = ref 0 in
  for r = 1 to rounds do
    for i = 1 to 20_000 do
      let k = string_of_int ((i * 7919 + r) mod 5000) in
      match Hashtbl.find_opt h k with
      | Some v -> acc := !acc + v
      | None -> Hashtbl.replace h k (String.length k)
    done;
    if r mod 10 = 0 then Hashtbl.reset h
  done;
  !acc

let () =
  probe "start" [ 256 * 1024; 1024 * 1024; 1536 * 1024; 3 * 1024 * 1024 ];
  let rounds = try int_of_string Sys.argv.(1) with _ -> 60 in
  let n = work rounds in
  probe "after" [ 4 * 1024 * 1024; 8 * 1024 * 1024; 12 * 1024 * 1024 ];
  Printf.printf "work %d\n" n
